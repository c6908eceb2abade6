"""Which of a task's pages hold a parsed document: DOMContentLoaded seen since the page's
main frame last navigated.

A snapshot of such a page waits for nothing. Asking Playwright instead
(`wait_for_load_state`) sends its driver three messages per snapshot even when the state
is reached, some 40 % of a snapshot's own Python time. The session watches every page it
holds (`watch`), so the events are seen from the page's first document on.
"""

from __future__ import annotations

import contextlib
import weakref

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page


class ParsedPages:
    def __init__(self) -> None:
        self._pages: weakref.WeakSet[Page] = weakref.WeakSet()

    def watch(self, page: Page) -> None:
        page.on("domcontentloaded", self._pages.add)
        page.on("framenavigated", lambda frame: self._navigated(page, frame))

    async def wait(self, page: Page, timeout_ms: float) -> None:
        """Until the page's current document is parsed (or `timeout_ms` passed: the read
        that follows then says what it finds)."""
        if page in self._pages:
            return
        with contextlib.suppress(PlaywrightError):
            await page.wait_for_load_state("domcontentloaded", timeout=timeout_ms)
            self._pages.add(page)

    def _navigated(self, page: Page, frame: Frame) -> None:
        # A new document (or a move within one: then the next wait ends at once).
        if frame.parent_frame is None:
            self._pages.discard(page)
