"""Asking a sandbox's app whether it serves: one HTTP request over its unix socket.

Every provider reaches its app through a unix socket on the gateway's side, never a TCP
port; httpx speaks HTTP/1.1 over it, and only the status of the answer is read.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import urlsplit

import httpx

PROBE_TIMEOUT_S = 2.0
# The app is plain HTTP on a local socket, so no TLS is ever spoken; httpx still builds a
# TLS context for each transport, loading the CA bundle each time (about 40 ms) unless it
# is handed one, built here once.
_NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


async def status(socket_path: Path, origin: str, path: str) -> int | None:
    """The status the app answers `path` with now; None if it gave no answer in time."""
    transport = httpx.AsyncHTTPTransport(uds=str(socket_path), verify=_NO_TLS, retries=0)
    # The request names the app's own origin as its Host, always over plain HTTP.
    url = f"http://{urlsplit(origin).netloc}{path}"
    try:
        async with (
            httpx.AsyncClient(transport=transport, timeout=PROBE_TIMEOUT_S) as client,
            client.stream("GET", url, headers={"connection": "close"}) as answer,
        ):
            return answer.status_code
    except (httpx.HTTPError, OSError, ValueError):
        return None
