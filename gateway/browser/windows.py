"""The windows a task's pages open (popups, new tabs), as Chromium tells of them at once.

Playwright hands a popup over only once it has set it up and its first navigation is over,
so `Windows` keeps what Chromium says at once (a window is opening, its first request) for an
action to wait, bounded, until what it opened has come (`popups.py` hands it over).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import Any

from playwright.async_api import BrowserContext, Page, Request
from playwright.async_api import Error as PlaywrightError

from .policy import BLANK

POPUP_WAIT_MS = 1000
# How long an action that opened a window waits for it to become a page of the task (or
# be refused), so its own answer says so. Playwright hands a popup over only once it has
# set it up and its first navigation is over: on a loaded machine, seconds after the click.
POPUP_REGISTER_S = 10.0


class Windows:
    """What Chromium said of the windows the pages opened, before Playwright hands them over."""

    def __init__(self) -> None:
        # Where each popup went first, seen before the popup is.
        self.first_targets: dict[Page, str] = {}
        self.popup_seen = asyncio.Event()
        # Windows the pages opened (Chromium says so at once), and those handed over since.
        self.opened = 0
        self.arrived = 0
        self.arrived_event = asyncio.Event()

    def first_request(self, request: Request, known: Collection[Page]) -> None:
        """Where a popup went first, seen before the popup is (Playwright hands a popup
        over once its first navigation is over, which the guard may have refused)."""
        if not request.is_navigation_request():
            return
        with contextlib.suppress(PlaywrightError):
            page = request.frame.page
            if page not in known and page not in self.first_targets:
                self.first_targets[page] = request.url
                self.popup_seen.clear()

    async def watch(self, context: BrowserContext, page: Page) -> None:
        """Count the windows the page opens. Chromium's `Page.windowOpen` comes as the
        page calls `window.open` (or follows a `target=_blank` link), before the action
        that did it returns; Playwright's popup comes once set up and loaded, which under
        load is long after. Without the count, an action cannot tell that a popup is on its
        way. A browser without the event (not Chromium) leaves the popups uncounted."""
        with contextlib.suppress(PlaywrightError):
            cdp = await context.new_cdp_session(page)
            cdp.on("Page.windowOpen", self.opening)
            await cdp.send("Page.enable")

    def opening(self, _event: Any) -> None:
        self.opened += 1

    def handed_over_one(self) -> None:
        self.arrived += 1
        self.arrived_event.set()

    async def settle(self) -> None:
        """Wait, bounded, for the windows an action opened to come as popups."""
        await self.handed_over()
        # A popup's first request has been seen, the popup itself not yet: it is coming.
        if self.first_targets:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.popup_seen.wait(), POPUP_WAIT_MS / 1000)

    async def handed_over(self) -> None:
        """Wait, bounded, until every window the pages opened has come as a popup."""
        if self.arrived >= self.opened:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(POPUP_REGISTER_S):
                while self.arrived < self.opened:
                    self.arrived_event.clear()
                    await self.arrived_event.wait()
        # One that never came (a named window reused, one closed at once) is not waited
        # for again by every later call.
        self.arrived = max(self.arrived, self.opened)

    async def target(self, popup: Page) -> str:
        first = self.first_targets.pop(popup, None)
        if first is not None:
            return first
        target = popup.url
        if target == BLANK:
            # The popup's first navigation may not have started yet: its request says where.
            with contextlib.suppress(PlaywrightError):
                request = await popup.wait_for_event(
                    "request", lambda r: r.is_navigation_request(), timeout=POPUP_WAIT_MS
                )
                target = request.url
        return target
