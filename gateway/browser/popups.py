"""A popup or new tab a task's page opened, handed over as a page of the task or closed.

A popup headed for an allowed origin becomes a page of the task (`pages` of the session,
`p2` and on); one headed anywhere else is closed and is a refusal that denies the call
observing it; one past `MAX_PAGES` is closed and said so (`pages_refused`). Where it was
headed comes from what Chromium said of it first (`windows.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from .policy import page_url_allowed
from .session_state import SessionState

# Pages a task may hold at once (its first and the popups it kept); a popup beyond is closed.
MAX_PAGES = 8


def popup(session: SessionState, popup: Page, watch: Callable[[Page], None]) -> None:
    """A page the context opened: a page of the task (its events `watch`ed as the first
    page's are), unless the task holds too many."""
    windows = session.windows
    windows.popup_seen.set()
    if popup in session.pages.values() or session.opening_own:
        return
    windows.handed_over_one()
    if len(session.pages) >= MAX_PAGES:
        session.spawn(refuse_popup(session, popup, f"the task holds {MAX_PAGES} pages already"))
        return
    page_id = session.new_page_id()
    session.pages[page_id] = popup
    watch(popup)
    session.spawn(adopt_popup(session, page_id, popup))


async def refuse_popup(session: SessionState, popup: Page, why: str) -> None:
    target = await session.windows.target(popup)
    session.violate("popup_closed", target, denies=False)
    session.note("pages_refused", {"url": target[:512], "why": why})
    with contextlib.suppress(PlaywrightError):
        await popup.close()


async def adopt_popup(session: SessionState, page_id: str, popup: Page) -> None:
    """A popup on an allowed origin stays, as a page of the task; one headed anywhere
    else is closed and is a refusal."""
    target = await session.windows.target(popup)
    if not page_url_allowed(target, session.origins):
        session.pages.pop(page_id, None)
        session.violate("popup_blocked", target, denies=True)
        with contextlib.suppress(PlaywrightError):
            await popup.close()
        return
    opened = {"page": page_id, "url": target[:512]}
    session.note("pages_opened", opened)
    if session.identity is not None:
        await session.sink.record(session.identity, "page_opened", opened)
