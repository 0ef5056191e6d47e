"""A device run's archive merged in one step: `popkit merge FILE.tgz` (merge_files).

`scripts/gpu_session.sh -o DIR -a FILE.tgz` keeps DIR as one archive whose top folder is DIR's name: gs/ with
performance.jsonl (the records), the numbered .txt tables and gpu.txt, and builds/PROBLEM.py (the files that ran).
Every folder of the archive that holds a performance.jsonl is a run: its records join the log and its tables go to
device/ beside it, exactly as `popkit merge DIR/performance.jsonl --tables DIR` does (logs.merge_runs).

Its builds go to BUILDS/STAMP/PROBLEM.py (.popkit/builds/, git-ignored; STAMP the run's first record time, as in
its tables' names), where `popkit promote PROBLEM --submission` takes them: promote copies the one that wins into
logs/incumbents/ (committed, the incumbent it replaces kept in archive/ there), so the others, 100-200 KB a
problem a run, stay out of git, and the records name each by its sha256 and commit.

The archive is read whole into memory, never unpacked onto the disk at its own paths, and refused in one line,
before anything is written, when it is corrupt or truncated, larger than MAX_BYTES unpacked, or holds a member
outside its top (an absolute path, '..'), a link, anything else but files and folders, or a file twice (one would
be lost): no run's archive does.
"""
from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from popcorn.errors import PopkitError
from popcorn.evidence.logs import ROOT, Merge, Run, merge_logs, merge_runs, require_sources

SUFFIXES = (".tgz", ".tar.gz", ".tar")
BUILDS = ROOT / ".popkit" / "builds"
MAX_BYTES = 64 << 20        # unpacked; a run's records, tables and builds are a few MB
BLOCK = 512                 # a tar block: the archive ends with blocks of zeros


def is_archive(path: Path | str) -> bool:
    return str(path).lower().endswith(SUFFIXES)


def merge_files(files: list[Path | str], target: Path | str, tables: Path | str | None = None,
                builds: Path | None = None) -> Merge:
    """`popkit merge FILES`: performance.jsonl files (logs.merge_logs, TABLES their run's folder), or run archives,
    every run in them with its tables, and its builds to BUILDS (default: .popkit/builds). Not the two kinds at
    once: an archive brings its own tables, which --tables would mix with another run's."""
    paths = [Path(file) for file in files]
    archives = [path for path in paths if is_archive(path)]
    if not archives:
        if builds is not None:        # it was ignored without a word: the builds stayed in DIR/builds
            raise PopkitError(f"--builds {builds}: only an archive's builds are unpacked there; a performance.jsonl "
                              "merge leaves them in its run folder's builds/ (--tables DIR names them): drop --builds "
                              "or merge the run's archive; nothing merged")
        return merge_logs(paths, target, tables)
    if len(archives) < len(paths) or tables is not None:
        raise PopkitError("an archive brings its own records, tables and builds: merge archives alone, without "
                          "performance.jsonl files or --tables; nothing merged")
    require_sources(archives)
    return merge_runs([run for archive in archives for run in archive_runs(archive)], target, builds or BUILDS)


def archive_runs(path: Path) -> list[Run]:
    """The runs of the archive at PATH: each folder with a performance.jsonl, its .txt tables and builds/*.py."""
    files = read_archive(path)
    logs = sorted(PurePosixPath(name) for name in files if PurePosixPath(name).name == "performance.jsonl")
    if not logs:
        # Not "once its first verb has ended": a verb refused before it ran ends and logs nothing.
        raise PopkitError(f"{path}: no performance.jsonl in it: no verb of the run logged a record (each was refused "
                          "before it ran, or the run was cut before the first one ended; its tables say which); "
                          "nothing merged")

    def inside(folder: PurePosixPath, suffix: str) -> dict[str, bytes]:
        # By name, not in the archive's order (GNU tar's is the folder's, which listed 02-bench before 01-check).
        return {PurePosixPath(name).name: files[name] for name in sorted(files)
                if PurePosixPath(name).parent == folder and name.endswith(suffix)}
    return [Run([(f"{path}:{log}", files[str(log)])], f"{path}:{log.parent}", inside(log.parent, ".txt"),
                inside(log.parent / "builds", ".py")) for log in logs]


def read_archive(path: Path) -> dict[str, bytes]:
    """The files of the tar at PATH (gzipped or not) by their path in it ('gs/performance.jsonl'), checked as the
    module's docstring says."""
    def refused(why: str) -> PopkitError:
        return PopkitError(f"{path}: {why}; nothing merged")
    if path.stat().st_size > MAX_BYTES:
        raise refused(f"over {MAX_BYTES >> 20} MB, more than a run's archive holds")
    data = path.read_bytes()
    try:
        if data[:2] == b"\x1f\x8b":      # read to its end, so that a truncated or damaged stream is found now
            data = gzip.GzipFile(fileobj=io.BytesIO(data)).read(MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:        # gzip.BadGzipFile is an OSError
        raise refused(f"not a readable archive ({exc})") from None
    if len(data) > MAX_BYTES:
        raise refused(f"over {MAX_BYTES >> 20} MB unpacked, more than a run's archive holds")
    files = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts:
                    raise refused(f"{member.name}: outside the archive's folder (an absolute path or '..')")
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise refused(f"{member.name}: a link to {member.linkname} (a run's archive holds only files "
                                  "and folders)")
                if not member.isfile() or member.issparse():
                    raise refused(f"{member.name}: neither a file nor a folder")
                if str(name) in files:
                    raise refused(f"{member.name}: twice in the archive")
                files[str(name)] = tar.extractfile(member).read()
            end = tar.offset
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise refused(f"not a readable archive ({exc})") from None
    # tarfile takes a tar cut between two members for a whole one: only its closing blocks of zeros tell
    if data[end:end + BLOCK] != bytes(BLOCK):
        raise refused("not a readable archive (it ends before its closing blocks: truncated)")
    return files
