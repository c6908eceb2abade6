"""Asking a sandbox's app whether it serves: one HTTP request over its unix socket, and
the wait for a started app to answer.

Every provider reaches its app through a unix socket on the gateway's side, never a TCP
port; httpx speaks HTTP/1.1 over it, and only the status of the answer is read. An app
serves when its health path answers 2xx.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.core.sandbox_spec import Repository

from .errors import Unhealthy
from .provider import Health, SandboxHandle, SandboxState

PROBE_TIMEOUT_S = 2.0
# How often a starting app is asked again.
PROBE_INTERVAL_S = 0.05
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


def healthy(answer: int | None) -> bool:
    """Whether a health answer says the app serves."""
    return answer is not None and 200 <= answer < 300


async def health(handle: SandboxHandle, socket_path: Path, path: str) -> Health:
    """The handle's health now: its app is asked unless it is down or torn down."""
    if handle.state in (SandboxState.TORN_DOWN, SandboxState.DOWN):
        return Health(handle.state, False)
    answer = await status(socket_path, handle.origin, path)
    ok = healthy(answer)
    return Health(handle.state, ok, None if ok else f"health answer: {answer}")


async def until_healthy(
    socket_path: Path,
    origin: str,
    repository: Repository,
    exited: Callable[[], Awaitable[dict[str, Any] | None]],
    *,
    log: Callable[[], str] | None = None,
) -> None:
    """Wait for a started app to answer its health path with 2xx, within the
    registration's `ready_timeout_s`; raises `Unhealthy` when it does not, or when it
    exits first. `exited()` is None while the app runs, and once it ended what is known
    of its end (`exit_code` first); `log()`, when given, is quoted on a timeout."""
    deadline = time.monotonic() + repository.ready_timeout_s
    while True:
        ended = await exited()
        if ended is not None:
            raise Unhealthy(
                f"the app exited ({ended.get('exit_code')}) before it was healthy",
                details=ended,
            )
        answer = await status(socket_path, origin, repository.health_path)
        if healthy(answer):
            return
        if time.monotonic() >= deadline:
            raise Unhealthy(
                f"the app did not answer {repository.health_path} with 2xx within "
                f"{repository.ready_timeout_s:g} s",
                details={"last_status": answer, **({"log": log()} if log is not None else {})},
            )
        await asyncio.sleep(PROBE_INTERVAL_S)
