"""Read the provenance comment of a built file: which problem's parts, with which sha256."""
from __future__ import annotations

import re
from pathlib import Path

PART_LINE = re.compile(r"^# part (\S+) sha256 ([0-9a-f]{64})$", re.MULTILINE)
BUILT_FROM = re.compile(r"^# Built by popkit from parts/([^/:\s]+):", re.MULTILINE)   # the template's third line


def built_from(text: str) -> str | None:
    """The problem whose parts a built file's text was built from; None for a file popkit did not build."""
    match = BUILT_FROM.search(text)
    return match.group(1) if match else None


def part_hashes(path: Path) -> dict[str, str]:
    """{part path: sha256} from a built file's header ({} for a file popkit did not build)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return dict(PART_LINE.findall(text))


def changed_parts(candidate: Path, incumbent: Path) -> list[str] | None:
    """Parts added, removed or changed between two built files; None when either has no part hashes (the
    competition folder's reference, a fetched or hand-written file): which parts changed is then unknown."""
    a, b = part_hashes(candidate), part_hashes(incumbent)
    if not a or not b:
        return None
    return sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
