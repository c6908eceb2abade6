"""A gateway served for a whole test session on a thread of its own, with the host page.

The host page is served first, on its own loopback origin, so the gateway can be started
with that origin allowed to open tab channels. Both stop when the session ends; on the way
out every task still live is ended and anything still held for one fails the session
(the same leak check as `live_gateway`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.testing.host_page import host_app
from gateway.testing.live import live_gateway
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
    _stop: Callable[[], None]

    def stop(self) -> None:
        self._stop()


def serve_host_page(loop: LoopThread, port: int = 0) -> tuple[str, Callable[[], None]]:
    """Only the host page (for a gateway that runs elsewhere)."""
    ready: asyncio.Future[str] = loop.loop.create_future()
    done = asyncio.Event()

    async def main() -> None:
        try:
            async with serving(host_app(), port=port) as origin:
                ready.set_result(origin)
                await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = asyncio.run_coroutine_threadsafe(main(), loop.loop)
    origin = loop.run(_wait(ready), timeout=START_TIMEOUT_S)

    def stop() -> None:
        loop.loop.call_soon_threadsafe(done.set)
        task.result(timeout=30)

    return origin, stop


def start_gateway(
    loop: LoopThread,
    data_dir: Path,
    *,
    dashboard_origins: Sequence[str] = (),
    setup: Callable[[Gateway], None] | None = None,
    **overrides: Any,
) -> ServedGateway:
    """Serve the host page and a gateway that allows it and `dashboard_origins`."""
    ready: asyncio.Future[ServedGateway] = loop.loop.create_future()
    done = asyncio.Event()

    async def main() -> None:
        try:
            async with serving(host_app()) as host_origin:
                origins = [host_origin, *dashboard_origins]
                settings = test_settings(data_dir, dashboard_origins=origins, **overrides)
                async with live_gateway(settings, setup=setup) as live:
                    key = settings.control_key
                    assert key is not None
                    ready.set_result(
                        ServedGateway(live.base_url, key, host_origin, live.gateway, loop, stop)
                    )
                    await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = asyncio.run_coroutine_threadsafe(main(), loop.loop)

    def stop() -> None:
        loop.loop.call_soon_threadsafe(done.set)
        # The leak check's failure, if any, is raised here.
        task.result(timeout=60)

    try:
        served: ServedGateway = loop.run(_wait(ready), timeout=START_TIMEOUT_S)
        return served
    except BaseException:
        with contextlib.suppress(Exception):
            task.cancel()
        raise


async def _wait(future: asyncio.Future[Any]) -> Any:
    return await future
