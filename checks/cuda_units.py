"""Embedded CUDA parts as one translation unit: the names two parts may not both define.

A built file's loader (parts/common/cuda_loader.py) compiles one unit per .cu part on machines of 4+ CPUs and every
part as one unit below that. In the one unit, the parts' anonymous namespaces merge, so a constant or a type that
two parts both define is a redefinition: the GPU hosts (16 CPUs) never see it and a small runner fails to build
(dc518b3's kColumnGroup passed a GPU gate that way). The builder refuses such parts, and the preflight and
promote refuse a built file that embeds them (its CUDA_PARTS), so a broken build is caught before it is promoted
or submitted.
"""
from __future__ import annotations

import ast
import re
import warnings

# What a CUDA part defines at namespace scope (a line that starts in column 0, the parts' style inside their
# namespaces): a constant or device variable, or a type. Functions are left out: two parts may overload a name.
NAMESPACE_DEFINITIONS = (
    re.compile(r"^(?:template\s*<.*>\s*)?(?:(?:static|inline|constexpr|const|__constant__|__device__|__managed__)\s+)+"
               r"(?:(?:unsigned|signed|long)\s+)*[A-Za-z_][\w:<>]*\s*[*&]?\s*\b([A-Za-z_]\w*)"
               r"\s*(?:\[[^\]]*\]\s*)*[=;{]"),
    re.compile(r"^(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+(?:__align__\(\d+\)\s+)?"
               r"([A-Za-z_]\w*)\b(?!\s*;)"),
    re.compile(r"^using\s+([A-Za-z_]\w*)\s*="),
)
ONE_UNIT_CLASH = ("machines under 4 CPUs compile every part as one translation unit, where a second definition of a "
                  "name fails the build (parts/common/cuda_loader.py); rename one")


def namespace_clashes(texts: dict[str, str]) -> list[str]:
    """'parts/A and parts/B both define NAME' for each constant, device variable or type that two CUDA parts
    (path -> text) define at namespace scope (NAMESPACE_DEFINITIONS)."""
    owners: dict[str, list[str]] = {}
    for path, text in texts.items():
        for line in text.splitlines():
            for pattern in NAMESPACE_DEFINITIONS:
                found = pattern.match(line)
                if found and path not in owners.setdefault(found.group(1), []):
                    owners[found.group(1)].append(path)
    return [f"{' and '.join(f'parts/{path}' for path in paths)} {'both' if len(paths) == 2 else 'all'} define {name}"
            for name, paths in owners.items() if len(paths) > 1]


def embedded_parts(tree: ast.Module) -> dict[str, str] | None:
    """A built file's CUDA_PARTS (path -> text), the literal its top level assigns; None when it has none."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CUDA_PARTS" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            try:
                parts = ast.literal_eval(node.value)
            except ValueError:
                return None
            if all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items()):
                return parts
    return None


def built_file_clashes(text: str) -> list[str]:
    """namespace_clashes of the CUDA parts a built file's text embeds ([] for a file without them, or one that
    is not Python: other checks name that)."""
    try:
        with warnings.catch_warnings():          # a file's own escape-sequence warnings are the preflight's to show
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    return namespace_clashes(embedded_parts(tree) or {})
