"""A server-sent-events frame parser: byte chunks in, (event, data) pairs out.

Frames are 'event: NAME' and 'data: TEXT' lines ended by a blank line; lines
starting with ':' are comments; several data lines join with newlines. A last
frame cut off before its blank line is still delivered. A line longer than the
caller's limit is an error (LineTooLong): a stream may last an hour.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Event:
    name: str
    data: str
    complete: bool = True   # False: the stream ended before the frame's closing blank line


class LineTooLong(ValueError):
    """A line grew past the limit without ending."""


def iter_lines(chunks: Iterable[bytes], max_line_bytes: int) -> Iterator[str]:
    """Decoded lines (without their line ending) from arbitrary byte chunks. A line's pieces are joined once,
    at its end: a result of many megabytes in small chunks takes time in proportion to its size."""
    pieces, size = [], 0
    for chunk in chunks:
        *ends, rest = chunk.split(b"\n")
        for end in ends:
            yield _decode(b"".join(pieces) + end)
            pieces, size = [], 0
        if rest:
            pieces.append(rest)
            size += len(rest)
            if size > max_line_bytes:
                raise LineTooLong(f"a line is longer than {max_line_bytes:,} bytes")
    if pieces:
        yield _decode(b"".join(pieces))


def _decode(line: bytes) -> str:
    return line.rstrip(b"\r").decode("utf-8", errors="replace")


def iter_events(chunks: Iterable[bytes], max_line_bytes: int) -> Iterator[Event]:
    """The events of a stream, in order."""
    name, data = "message", []
    for line in iter_lines(chunks, max_line_bytes):
        if not line:
            if data:
                yield Event(name, "\n".join(data))
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data:
        yield Event(name, "\n".join(data), complete=False)
