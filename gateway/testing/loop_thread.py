"""An event loop on a thread of its own, for driving async parts from synchronous tests.

pytest-playwright's fixtures are synchronous (its `page` runs Playwright's sync API, which
refuses to run inside a running event loop), while a gateway, the MCP SDK client and the
bridge client are asynchronous. Each runs here, on one loop that outlives any test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "gateway-testing") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (its exception is raised here)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def enter(
        self, context: contextlib.AbstractAsyncContextManager[T], timeout: float | None = None
    ) -> tuple[T, Callable[[float | None], None]]:
        """Enter `context` on the loop and keep it entered until the returned `leave` is
        called (what leaving raised, a failed leak check say, is raised by `leave`).

        It is entered and left in one task of its own: anyio's task groups (uvicorn's
        server, the MCP SDK's client) must be left by the task that entered them."""
        ready: asyncio.Future[T] = self.loop.create_future()
        done = asyncio.Event()

        async def hold() -> None:
            try:
                async with context as value:
                    ready.set_result(value)
                    await done.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        held = asyncio.run_coroutine_threadsafe(hold(), self.loop)

        async def entered() -> T:
            return await ready

        try:
            value = self.run(entered(), timeout)
        except BaseException:
            held.cancel()
            raise

        def leave(timeout: float | None = 60.0) -> None:
            self.loop.call_soon_threadsafe(done.set)
            held.result(timeout)

        return value, leave

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def drain() -> None:
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        self.run(drain(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()
