"""What a PNG is, from its header alone: its width and height, or not a PNG."""

from __future__ import annotations

import struct

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's width and height from its header, or None if it is not a PNG."""
    if len(data) < 24 or not data.startswith(SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height
