"""Asking a sandbox's app whether it serves: one HTTP request over its own stream.

Every provider reaches its app through a stream it opens (a unix socket on the gateway's
side), never a TCP port, so the health check speaks HTTP/1.1 over that stream itself and
reads only the status line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

PROBE_TIMEOUT_S = 2.0

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def status(open_connection: Opener, origin: str, path: str) -> int | None:
    """The status the app answers `path` with now; None if it gave no answer in time."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await open_connection()
            host = urlsplit(origin).netloc
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            line = await reader.readline()
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.close()
