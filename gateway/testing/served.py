"""A gateway served for a whole test session on a thread of its own, with the host page.

The host page is served first, on its own loopback origin, so the gateway can be started
with that origin allowed to open tab channels. Both stop when the session ends; on the way
out every task still live is ended and anything still held for one fails the session
(the same leak check as `live_gateway`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.testing.host_page import host_app
from gateway.testing.live import LiveGateway, live_gateway
from gateway.testing.loop_thread import LoopThread
from gateway.testing.settings import test_settings

START_TIMEOUT_S = 120.0


@dataclass
class ServedGateway:
    base_url: str
    control_key: str
    host_origin: str
    # The in-process gateway when this session started it (None for one elsewhere). Its
    # objects belong to `loop`'s thread: touch them through `loop.run`.
    gateway: Gateway | None
    loop: LoopThread
    _leave: Callable[[float | None], None]

    def stop(self) -> None:
        self._leave(60)


def serve_host_page(loop: LoopThread, port: int = 0) -> tuple[str, Callable[[], None]]:
    """Only the host page (for a gateway that runs elsewhere)."""
    origin, leave = loop.enter(serving(host_app(), port=port), timeout=START_TIMEOUT_S)
    return origin, lambda: leave(30)


@contextlib.asynccontextmanager
async def _host_page_and_gateway(
    data_dir: Path,
    dashboard_origins: Sequence[str],
    setup: Callable[[Gateway], None] | None,
    overrides: dict[str, Any],
) -> AsyncIterator[tuple[str, LiveGateway]]:
    async with serving(host_app()) as host_origin:
        origins = [host_origin, *dashboard_origins]
        settings = test_settings(data_dir, dashboard_origins=origins, **overrides)
        async with live_gateway(settings, setup=setup) as live:
            yield host_origin, live


def start_gateway(
    loop: LoopThread,
    data_dir: Path,
    *,
    dashboard_origins: Sequence[str] = (),
    setup: Callable[[Gateway], None] | None = None,
    **overrides: Any,
) -> ServedGateway:
    """Serve the host page and a gateway that allows it and `dashboard_origins`."""
    (host_origin, live), leave = loop.enter(
        _host_page_and_gateway(data_dir, dashboard_origins, setup, overrides),
        timeout=START_TIMEOUT_S,
    )
    key = live.gateway.settings.control_key
    assert key is not None
    # Leaving runs the leak check: its failure, if any, is raised by `stop`.
    return ServedGateway(live.base_url, key, host_origin, live.gateway, loop, leave)
