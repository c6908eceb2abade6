"""The main-frame navigations of a task's current page, for an action's aftermath.

An action that started a navigation (a click on a link, a form sent) answers once the
navigation is over: its document loaded, or its request refused or failed. The count
tells an action whether it started one; the method of the latest (a redirect's last hop)
tells a form the server answered with a page (a POST: its errors, a confirmation step)
from one redirected to its result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Request


class Navigations:
    """Main-frame navigation requests of the current page, and those not over yet."""

    def __init__(self) -> None:
        self.count = 0
        self.method = "GET"
        self._under_way: set[Request] = set()
        self._settled = asyncio.Event()

    def request(self, request: Request, main_frame: object) -> None:
        if request.is_navigation_request() and request.frame == main_frame:
            self.count += 1
            self.method = request.method
            self._under_way.add(request)

    def request_over(self, request: Request) -> None:
        if request in self._under_way:
            self._under_way.discard(request)
            self._settled.set()

    def forget(self) -> None:
        """Another page is current: the navigations of the one before are not waited for."""
        self._under_way.clear()

    async def over(self, timeout_s: float, page: Callable[[], Page]) -> None:
        """Wait until no navigation of the page is under way and its document is parsed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._under_way:
                    self._settled.clear()
                    await self._settled.wait()
                with contextlib.suppress(PlaywrightError):
                    await page().wait_for_load_state("domcontentloaded")
