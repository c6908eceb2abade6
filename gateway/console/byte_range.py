"""One byte range of an artifact (`Range: bytes=a-b`), for the console's video player: a
`<video>` seeks by asking for the part it needs. Only a single range is served; anything
else (several ranges, another unit, a malformed header) gets the whole artifact, as HTTP
allows, and a range past its end is 416."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

_SINGLE = re.compile(r"bytes=(\d{0,15})-(\d{0,15})")


class Unsatisfiable(Exception):
    """The range starts past the artifact's end."""


def parse(header: str | None, size: int) -> tuple[int, int] | None:
    """The first and last byte asked for (inclusive), or None for the whole."""
    if not header:
        return None
    found = _SINGLE.fullmatch(header.strip())
    if found is None or found.group(1) == found.group(2) == "":
        return None
    first, last = found.group(1), found.group(2)
    if first == "":
        # The last N bytes.
        length = int(last)
        if length == 0:
            raise Unsatisfiable
        return max(0, size - length), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size:
        raise Unsatisfiable
    if end < start:
        return None
    return start, end


async def sliced(chunks: AsyncIterator[bytes], start: int, end: int) -> AsyncIterator[bytes]:
    """The bytes `start..end` (inclusive) of a stream of chunks."""
    offset = 0
    try:
        async for chunk in chunks:
            low, high = offset, offset + len(chunk)
            offset = high
            if high <= start:
                continue
            yield chunk[max(0, start - low) : min(len(chunk), end + 1 - low)]
            if high > end:
                break
    finally:
        # The rest is not read: the artifact's reader is let go now, not when collected.
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
