"""Writing a file whole: readers see the old content or the new, never half of it; a log's lock."""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from pathlib import Path


def is_special(path: Path | str) -> bool:
    """PATH (its links followed) is a device, a named pipe or a socket: a file to write into, never one to replace."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def is_null_device(path: Path | str) -> bool:
    """PATH is the null device (/dev/null, or a link to it)."""
    try:
        return os.path.exists(path) and os.path.samefile(path, os.devnull)
    except (OSError, ValueError):
        return False


def _make_folder(path: Path) -> None:
    """Make PATH's folder where it is missing. A file in its place fails later, as 'Not a directory': mkdir said
    'File exists', of a path that does not."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)


def folder_error(folder: Path) -> str | None:
    """Why FOLDER, which does not exist, could not be made (a file in the way, a read-only place), or None. Probed
    with a temporary folder made and removed in the nearest folder above it that exists; FOLDER itself is made only
    by the write that needs it: made by this question, it stayed behind, empty, when the command was then refused."""
    above = folder
    while not above.exists() and above != above.parent:
        above = above.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".popkit-probe.", dir=above))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_error(path: Path | str) -> str | None:
    """Why write_atomic(PATH) would fail (its folder cannot be made or takes no new file), or None: asked before
    a long run whose end writes PATH. Probed as write_atomic writes, with a temporary file in the folder (as root
    os.access says yes on a read-only mount); a missing folder is probed by folder_error, not made."""
    path = Path(path)
    if is_special(path):
        return None
    if not path.parent.is_dir():
        return folder_error(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_atomic(path: Path | str, data: bytes | str) -> Path:
    """Write through a temporary file in the same folder and os.replace; text is written as UTF-8 with
    its newlines untouched. The file is 0644 (mkstemp's 0600 would hide a built file from its uploader).

    A device or a named pipe (/dev/null, /dev/stdout) is written into, as any program writes to one: replacing it
    would leave a regular file where the device was (`merge --log /dev/null`, run as root, did that to /dev/null).
    A link stays a link: the file it names is the one replaced (replacing the link cut a log off a shared one)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if is_special(path):
        with open(path, "wb") as handle:
            handle.write(payload)
        return path
    real = Path(os.path.realpath(path))
    _make_folder(real)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", dir=real.parent)
    except OSError as exc:        # named after the file the caller asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, 0o644)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def locked(path: Path | str):
    """A descriptor of PATH (made when missing; read-write where allowed, else write-only) holding its exclusive
    lock, for as long as the block runs. Every writer of a log takes it: a merge replaces the file, and a record
    appended between its reading and its replacing was lost. A file replaced while this waited is opened again
    (a lock on the old one guards nothing)."""
    path = Path(path)
    _make_folder(path)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except PermissionError:      # writable, not readable: a log that is appended to, never read
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                current = False
            if current:
                yield fd
                return
        finally:
            os.close(fd)
