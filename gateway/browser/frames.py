"""Which of a page's empty frames the guard refused, and for which origin.

A frame headed for an origin the task does not have never loads (the guard answers its
navigation without forwarding it), so its snapshot shows an iframe with nothing in it. The
snapshot says instead that it was refused, with the origin only (a URL's path and query
may carry what the page put there). Where the frame was headed is the last navigation
request the browser made for it, a server's redirect hop included, or else its element's
`src`.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page, Request

from gateway.core.origins import OriginError, origin_of

from .snapshot import empty_frames

# Each lookup is one round trip to the page; a page of many empty frames gets this many.
MAX_FRAMES_LOOKED_UP = 20
LOOKUP_TIMEOUT_MS = 1000


class FrameTargets:
    """Where each frame of a context last asked to go."""

    def __init__(self) -> None:
        self._targets: weakref.WeakKeyDictionary[Frame, str] = weakref.WeakKeyDictionary()

    def request(self, request: Request) -> None:
        if not request.is_navigation_request():
            return
        with contextlib.suppress(PlaywrightError, TypeError):
            frame = request.frame
            if frame.parent_frame is not None:
                self._targets[frame] = request.url

    async def refused(
        self, page: Page, raw: str, allowed: Callable[[str], bool]
    ) -> dict[str, tuple[str, str]]:
        """The snapshot `raw`'s empty frames the guard refused: ref -> (title, origin)."""
        found: dict[str, tuple[str, str]] = {}
        for ref in empty_frames(raw)[:MAX_FRAMES_LOOKED_UP]:
            try:
                handle = await page.locator(f"aria-ref={ref}").element_handle(
                    timeout=LOOKUP_TIMEOUT_MS
                )
                frame = await handle.content_frame()
                title = await handle.get_attribute("title") or ""
                src = await handle.evaluate("(e) => e.src || ''")
            except PlaywrightError:
                continue
            if (
                frame is not None
                and frame.url.startswith(("http:", "https:"))
                and allowed(frame.url)
            ):
                continue  # it loaded, on the task's own origin
            target = (self._targets.get(frame) if frame is not None else None) or src
            with contextlib.suppress(OriginError):
                origin = origin_of(target)
                if not allowed(target):
                    found[ref] = (title, origin)
        return found
