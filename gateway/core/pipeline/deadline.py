"""A tool's deadline: its handler runs until it answers, is cancelled, or runs out of time,
and the time it spends waiting for a person does not count."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import ErrorCode, ToolStatus

log = logging.getLogger(__name__)


class Pause:
    """Time a call's handler spends waiting for a person, which its deadline does not count."""

    __slots__ = ("_active", "_resumed", "_since", "total")

    def __init__(self) -> None:
        self._active = 0
        self._since = 0.0
        self.total = 0.0  # seconds paused so far, on the loop's clock
        self._resumed: asyncio.Event | None = None

    def begin(self) -> None:
        if self._active == 0:
            self._since = asyncio.get_running_loop().time()
            self.resumed.clear()
        self._active += 1

    def end(self) -> None:
        self._active -= 1
        if self._active == 0:
            self.total += asyncio.get_running_loop().time() - self._since
            self.resumed.set()

    def paused_for(self, now: float) -> float:
        """Seconds paused so far, the pause under way included."""
        return self.total + (now - self._since if self._active else 0.0)

    def counts(self) -> bool:
        """Whether the deadline is paused now (a person is being asked), or was moved."""
        return self._active > 0

    @property
    def resumed(self) -> asyncio.Event:
        if self._resumed is None:
            self._resumed = asyncio.Event()
        return self._resumed


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


async def run_handler(
    tool: Tool,
    context: ToolContext,
    args: BaseModel,
    cancel: asyncio.Event | None,
    pause: Pause,
    started: Callable[[asyncio.Future[Any]], None],
) -> Any:
    """The handler's value, made plain JSON; raises `ToolFailure` when it times out, is
    cancelled, or fails. `started` is told of the handler's future as soon as it exists."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + tool.timeout_s
    # What the handler sees of its deadline (a browser action is not started without
    # time to finish it): the same clock and pauses as the wait below.
    context.remaining = lambda: deadline + pause.paused_for(loop.time()) - loop.time()
    handler = asyncio.ensure_future(tool.handler(context, args))
    started(handler)
    waiter = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    try:
        while True:
            done, _ = await asyncio.wait(
                [handler] if waiter is None else [handler, waiter],
                timeout=max(0.0, deadline + pause.total - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if done:
                break
            if not pause.counts():
                if loop.time() >= deadline + pause.total:
                    break
                continue  # a person answered while it waited: the deadline moved
            # The handler waits for a person: its deadline resumes once they answer.
            resumed = asyncio.ensure_future(pause.resumed.wait())
            try:
                done, _ = await asyncio.wait(
                    [handler, resumed] if waiter is None else [handler, waiter, resumed],
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                resumed.cancel()
            if handler in done or (waiter is not None and waiter in done):
                break
    except asyncio.CancelledError:
        handler.cancel()
        raise
    finally:
        if waiter is not None:
            waiter.cancel()
    if handler not in done:
        handler.cancel()
        # The outcome is decided already; the handler only has to be gone.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler
        if waiter is not None and waiter in done:
            raise ToolFailure(ToolStatus.FAILED, ErrorCode.CANCELLED, "the call was cancelled")
        raise ToolFailure(
            ToolStatus.TIMEOUT,
            ErrorCode.TIMEOUT,
            f"{tool.name} did not finish within {tool.timeout_s:g} s",
            retryable=True,
        )
    try:
        return _jsonable(handler.result())
    except GatewayError:
        raise
    except asyncio.CancelledError as exc:
        raise ToolFailure(
            ToolStatus.FAILED, ErrorCode.CANCELLED, "the handler was cancelled"
        ) from exc
    except Exception as exc:
        log.warning("tool %s failed: %r", tool.name, exc)
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.HANDLER_ERROR,
            f"{tool.name} failed: {type(exc).__name__}",
        ) from exc
