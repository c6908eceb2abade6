"""A dialog a task's page opened (alert, confirm, prompt, beforeunload), waiting for an answer.

A dialog holds its page: nothing runs there until it is answered. So one is never left
open: the call whose action opened it answers at once with what the page asked, and
`browser.handle_dialog` accepts or dismisses it; one nobody answers within
`DIALOG_TIMEOUT_S`, or still open when the task's next call starts, is dismissed and
recorded (`dialog_dismissed`). A page that keeps opening them gets its dialogs dismissed at
once past `MAX_DIALOGS_PER_DOCUMENT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any

from playwright.async_api import Dialog, Page
from playwright.async_api import Error as PlaywrightError

from .dialog_state import PendingDialog
from .session_state import SessionState

DIALOG_TIMEOUT_S = 30.0
MAX_DIALOGS_PER_DOCUMENT = 20
# Dialogs dismissed while a call leaves the page, past which the page is taken as stuck.
STUCK_AFTER_DIALOGS = 5
# How long the next call waits for an action a dialog had parked to end.
PARKED_WAIT_S = 3.0


def on_dialog(session: SessionState, page: Page, dialog: Dialog) -> None:
    """A dialog a page opened: shown to the call that can show it, else dismissed."""
    state = session.dialog_state
    pending = PendingDialog(dialog, time.time())
    if page is not session.page:
        session.spawn(dismiss(session, pending, "it opened on a page in the background"))
        return
    if state.on_document >= MAX_DIALOGS_PER_DOCUMENT:
        session.spawn(dismiss(session, pending, "the page opened too many dialogs"))
        return
    if state.in_call and not state.aware:
        session.spawn(dismiss(session, pending, "it opened during a call that cannot show it"))
        return
    if state.in_call and session.leaving and dialog.type != "beforeunload":
        session.spawn(dismiss(session, pending, "it opened while the page was being left"))
        state.dismissed_leaving += 1
        if state.dismissed_leaving >= STUCK_AFTER_DIALOGS:
            session.stuck.set()
        return
    state.on_document += 1
    if session.dialog is not None:
        session.spawn(dismiss(session, session.dialog, "another dialog followed it"))
    session.dialog = pending
    state.opened.set()
    asyncio.get_running_loop().call_later(DIALOG_TIMEOUT_S, _expire, session, pending)


def _expire(session: SessionState, pending: PendingDialog) -> None:
    if session.dialog is pending:
        session.spawn(
            dismiss(session, pending, f"nobody answered it within {DIALOG_TIMEOUT_S:g} s")
        )


async def dismiss(session: SessionState, pending: PendingDialog, why: str) -> None:
    """Dismiss a dialog nobody answers (so it never holds the page), and record it."""
    if session.dialog is pending:
        session.dialog = None
    with contextlib.suppress(PlaywrightError):
        await pending.dialog.dismiss()
    dismissed = {**pending.public(), "why": why}
    session.note("dialogs_dismissed", dismissed)
    if session.identity is not None:
        session.sink.repeated(
            session.identity, "dialog_dismissed", {**dismissed, "page": session.url}
        )


async def before_call(session: SessionState, answers_dialog: bool) -> None:
    """A dialog left open, and an action it had parked, end before the next call acts."""
    if answers_dialog:
        return
    if session.dialog is not None:
        await dismiss(session, session.dialog, "the next call came before it was answered")
    parked, session.parked = session.parked, None
    if parked is not None and not parked.done():
        await asyncio.wait([parked], timeout=PARKED_WAIT_S)


async def race(session: SessionState, work: Awaitable[Any]) -> Any:
    """The action's answer, or, when a dialog opens first, what the dialog asks (the
    action waits for it, parked)."""
    state = session.dialog_state
    state.opened.clear()
    task = asyncio.ensure_future(work)
    opened = asyncio.ensure_future(state.opened.wait())
    try:
        await asyncio.wait({task, opened}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        opened.cancel()
    if task.done() or session.dialog is None:
        return await task
    task.add_done_callback(_quiet)
    session.parked = task
    return {
        "dialog": session.dialog.public(),
        "next": "the page waits for an answer: browser.handle_dialog accepts or "
        f"dismisses it (dismissed on its own after {DIALOG_TIMEOUT_S:g} s)",
    }


def _quiet(future: asyncio.Future[Any]) -> None:
    """A parked action's outcome nobody waits for any more."""
    if not future.cancelled():
        future.exception()
