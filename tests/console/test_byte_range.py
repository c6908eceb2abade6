"""What part of a video the console serves for a `Range` header."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.console import byte_range


def test_a_single_range_is_served_and_anything_else_is_the_whole() -> None:
    assert byte_range.parse("bytes=0-", 100) == (0, 99)
    assert byte_range.parse("bytes=10-19", 100) == (10, 19)
    assert byte_range.parse("bytes=90-500", 100) == (90, 99)
    assert byte_range.parse("bytes=-10", 100) == (90, 99)
    assert byte_range.parse("bytes=-500", 100) == (0, 99)
    for whole in (None, "", "bytes=0-1,5-9", "items=0-5", "bytes=-", "bytes=9-2", "bytes=x-"):
        assert byte_range.parse(whole, 100) is None, whole
    for past in ("bytes=100-", "bytes=500-600", "bytes=-0"):
        with pytest.raises(byte_range.Unsatisfiable):
            byte_range.parse(past, 100)


async def test_the_bytes_of_a_range_are_cut_from_the_chunks_across_their_edges() -> None:
    data = bytes(range(100))
    closed = []

    async def chunks() -> AsyncIterator[bytes]:
        try:
            for at in range(0, 100, 7):
                yield data[at : at + 7]
        finally:
            closed.append(True)

    for start, end in ((0, 99), (3, 3), (6, 8), (13, 50), (98, 99)):
        got = b"".join([c async for c in byte_range.sliced(chunks(), start, end)])
        assert got == data[start : end + 1], (start, end)
    assert len(closed) == 5
