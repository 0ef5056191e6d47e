"""A server-sent-events frame parser: byte chunks in, (event, data) pairs out.

Frames are 'event: NAME' and 'data: TEXT' lines ended by a blank line; lines
starting with ':' are comments; several data lines join with newlines. A last
frame cut off before its blank line is still delivered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Event:
    name: str
    data: str
    complete: bool = True   # False: the stream ended before the frame's closing blank line


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Decoded lines (without their line ending) from arbitrary byte chunks."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", errors="replace")


def iter_events(chunks: Iterable[bytes]) -> Iterator[Event]:
    """The events of a stream, in order."""
    name, data = "message", []
    for line in iter_lines(chunks):
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
