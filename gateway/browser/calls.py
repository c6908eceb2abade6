"""One call's run on a task's page: its admission, its action, the settle after, the verdict.

A call takes the session's lock (one call at a time per task) and a slot of its Chromium
process's admission (`admission.py`, an action slot or, for a call that only reads, a read
slot); one turned away there never reaches the page. After the action, what it set off
(popups, a page taken back to its origins) is let finish, bounded, and then the guard's
verdict: a browser gone or an app down ends the call `unavailable`; what the guard stopped
since the last call ends it `denied`/`origin_blocked` (`violations.py`); otherwise the
result carries what happened besides (`SessionState.note`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from gateway.core.errors import ToolFailure
from gateway.core.registry import ToolContext
from gateway.core.results import ErrorCode

from . import dialogs, page_guard
from .admission import ActionSlots
from .errors import map_playwright_error
from .policy import page_url_allowed
from .session_state import SessionState
from .violations import denial

T = TypeVar("T")
SETTLE_TIMEOUT_S = 3.0
SNAPSHOT_TIMEOUT_MS = 30_000


async def run(
    session: SessionState,
    ctx: ToolContext,
    action: Callable[[Page], Awaitable[T]],
    *,
    dialog_aware: bool,
    answers_dialog: bool,
    keeps_refs: bool,
    reads_only: bool,
) -> T:
    """`BrowserSession.run`: the call's action, then the settle and the guard's verdict."""
    try:
        if not keeps_refs:
            action = _with_refs(session, action)
        lane = session.reads if reads_only else session.admission
        return await _run(session, ctx, action, dialog_aware, answers_dialog, lane)
    finally:
        session.release_start()


async def _run(
    session: SessionState,
    ctx: ToolContext,
    action: Callable[[Page], Awaitable[T]],
    dialog_aware: bool,
    answers_dialog: bool,
    lane: ActionSlots,
) -> T:
    async with session.lock:
        if session.lost is not None:
            raise session.gone()
        down = session.app_unavailable()
        if down is not None:
            ctx.evidence["page"] = session.url[:2048]
            raise down
        async with admitted(session, lane, ctx.time_left(), ctx.evidence):
            state = session.dialog_state
            state.in_call, state.aware = True, dialog_aware
            state.dismissed_leaving = 0
            session.stuck.clear()
            try:
                return await _act(session, ctx, action, answers_dialog)
            finally:
                state.in_call = state.aware = session.leaving = False


def _with_refs(
    session: SessionState, action: Callable[[Page], Awaitable[T]]
) -> Callable[[Page], Awaitable[T]]:
    async def restored(page: Page) -> T:
        if session.partial_map:
            # Taken again, whole, so the refs of the whole page's snapshot resolve (the
            # elements keep their refs from one snapshot to the next).
            await page.aria_snapshot(mode="ai", timeout=SNAPSHOT_TIMEOUT_MS)
            session.partial_map = False
        return await action(page)

    return restored


async def _act(
    session: SessionState,
    ctx: ToolContext,
    action: Callable[[Page], Awaitable[T]],
    answers_dialog: bool,
) -> T:
    """The action on the page, the settle after it, and the guard's verdict."""
    # The process may have died while the call waited for its slot.
    if session.lost is not None:
        raise session.gone()
    session.last_used = time.monotonic()
    error: ToolFailure | None = None
    result: Any = None
    try:
        await dialogs.before_call(session, answers_dialog)
        if session.dialog_state.aware and not answers_dialog:
            result = await dialogs.race(session, action(session.page))
        else:
            result = await action(session.page)
    except ToolFailure as exc:
        error = exc
    except PlaywrightError as exc:
        error = map_playwright_error(exc, browser_alive=session.process.alive)
        if error.code == ErrorCode.BROWSER_UNAVAILABLE:
            session.lose("the browser process ended")
    if session.lost is None and session.dialog is None:
        await _settle(session)
    ctx.evidence["page"] = session.url[:2048]
    if session.lost is not None:
        raise session.gone()
    down = session.app_unavailable()
    if down is not None:
        # The app went down during the action: what the page shows is not the app.
        raise down
    pending, session.pending = session.pending, []
    denied = denial(pending, session.url)
    if denied is not None:
        raise denied
    if pending:
        # Refused subresources: the page stayed on its origin; the call says so.
        ctx.evidence["blocked"] = [v.public() for v in pending][:20]
    if error is not None:
        raise error
    session.report(result)
    session.last_used = time.monotonic()
    return result  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def admitted(
    session: SessionState,
    lane: ActionSlots,
    time_left: float,
    evidence: dict[str, Any] | None = None,
) -> AsyncIterator[None]:
    """Hold one of the process's slots of `lane` (actions or reads) for what the block
    does to the page. A call turned away (`overloaded`) has not touched the page; its
    evidence says so, with the page as it was."""
    try:
        waited = await lane.acquire(time_left)
    except ToolFailure:
        if evidence is not None:
            evidence["page"] = session.url[:2048]
            evidence["admission"] = {"shed": True}
        raise
    if evidence is not None and waited > 0:
        evidence["admission"] = {"waited_ms": round(waited * 1000, 1)}
    started = time.monotonic()
    try:
        yield
    finally:
        lane.release(time.monotonic() - started)


async def _settle(session: SessionState) -> None:
    """Let the action's direct consequences (popups, a restore) finish before judging."""
    await session.windows.settle()
    waiting = [f for f in session.background if not f.done()]
    if session.restoring is not None and not session.restoring.done():
        waiting.append(session.restoring)
    if waiting:
        await asyncio.wait(waiting, timeout=SETTLE_TIMEOUT_S)
    if not page_url_allowed(session.url, session.origins):
        page_guard.restore_soon(session)
        assert session.restoring is not None
        await asyncio.wait([session.restoring], timeout=SETTLE_TIMEOUT_S)
