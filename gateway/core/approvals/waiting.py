"""A call waiting for a person: until an answer, its expiry, or its caller gives up.

While it waits, the call's client hears that it is still waiting (MCP progress) every
`KEEPALIVE_S`. Its one outcome is the request's: approved (the call runs), denied, expired
(`timeout`/`approval_timeout`, retryable), or cancelled (its caller went away, or the task
ended). Closing a request without a decision races the answers to the store: the store's
conditional update lets one win, and when an answer won, its outcome is the one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.approvals.request import ApprovalRequest, Status
from gateway.core.errors import ToolFailure
from gateway.core.registry import ProgressFn
from gateway.core.results import ErrorCode, ToolStatus

# How often a waiting call tells its client it is still waiting (MCP progress).
KEEPALIVE_S = 10.0

# Ends a request without a decision, if it is still pending; whether it did.
Close = Callable[[Status], Awaitable[bool]]


def _cancelled(message: str) -> ToolFailure:
    return ToolFailure(ToolStatus.FAILED, ErrorCode.CANCELLED, message)


async def await_outcome(
    request: ApprovalRequest,
    waiter: asyncio.Future[ApprovalRequest],
    *,
    clock: Callable[[], float],
    close: Close,
    cancel: asyncio.Event | None,
    progress: ProgressFn | None,
) -> None:
    """Return once `request` is approved; else raise the call's terminal failure."""
    stop: asyncio.Future[Any] | None = (
        asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    )
    try:
        while not waiter.done():
            left = request.expires_at - clock()
            if left <= 0:
                break
            waiting: list[asyncio.Future[Any]] = [waiter] if stop is None else [waiter, stop]
            await asyncio.wait(
                waiting,
                timeout=min(left, KEEPALIVE_S),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if stop is not None and stop.done():
                break
            if not waiter.done() and progress is not None:
                with contextlib.suppress(Exception):
                    await progress(0, None, f"waiting for a person to approve {request.tool}")
    except asyncio.CancelledError:
        await asyncio.shield(close("cancelled"))
        raise
    finally:
        if stop is not None:
            stop.cancel()
    if not waiter.done():
        cancelled = stop is not None and cancel is not None and cancel.is_set()
        if await close("cancelled" if cancelled else "expired"):
            if cancelled:
                raise _cancelled("the caller cancelled the call")
            raise ToolFailure(
                ToolStatus.TIMEOUT,
                ErrorCode.APPROVAL_TIMEOUT,
                f"no one answered the approval for {request.tool} in time",
                retryable=True,
                details={"approval_id": request.id},
            )
        # An answer won the race to the store: its outcome is the one.
        await waiter
    _outcome(waiter.result())


def _outcome(decided: ApprovalRequest) -> None:
    """Return if approved; else the call's terminal failure."""
    if decided.status == "approved":
        return
    if decided.status == "cancelled":
        raise _cancelled("the approval was cancelled (the task ended)")
    message = decided.decision.message if decided.decision else None
    raise ToolFailure(
        ToolStatus.DENIED,
        ErrorCode.APPROVAL_DENIED,
        f"a person declined {decided.tool}" + (f": {message}" if message else ""),
        details={"approval_id": decided.id},
    )
