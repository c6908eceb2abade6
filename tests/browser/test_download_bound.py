"""A download's bytes as the page's reading of it hands them over, checked on the gateway's
side: the reading runs in the page's own world, so a page that replaced `fetch`, a stream
reader or `btoa` answers what it likes. The bound and the shape hold all the same."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gateway.browser import downloads

LIMIT = 1024


def downloaded(got: Any) -> tuple[str | None, bytes]:
    return downloads.downloaded(got, LIMIT)


def test_bytes_within_the_bound_are_kept() -> None:
    assert downloaded({"data": base64.b64encode(b"x" * LIMIT).decode()}) == (None, b"x" * LIMIT)


@pytest.mark.parametrize(
    "got",
    [
        {"data": base64.b64encode(b"x" * (LIMIT + 1)).decode()},  # past the bound, decoded
        {"data": "A" * 87_384},  # 64 KiB the page made up, refused before decoding
    ],
)
def test_more_than_the_bound_is_refused_whatever_the_page_counted(got: Any) -> None:
    refusal, data = downloaded(got)
    assert refusal == f"it is over the bound of {LIMIT} bytes" and data == b""


@pytest.mark.parametrize("got", [None, "text", ["data"], {"data": 7}, {"data": "not base64!"}])
def test_a_reading_of_another_shape_keeps_nothing(got: Any) -> None:
    refusal, data = downloaded(got)
    assert refusal is not None and data == b""
