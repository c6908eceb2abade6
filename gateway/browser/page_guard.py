"""The guard's checks on a task's pages themselves, behind its origin proxy.

The proxy is the boundary (nothing it refuses reaches the network); what it refuses comes
here as a violation of the task. After every main-frame navigation the URL is checked again:
a page that ended up anywhere else (a blob: or data: document, a refused tunnel's error
page) is taken back to an allowed page or to about:blank, and a page in the background is
closed. A frame headed off the task's origins is a violation too.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page

from .guards import BlockedRequest
from .policy import BLANK, is_browser_service, page_url_allowed
from .session_state import SessionState, log_failure
from .violations import refused_kind


def proxy_blocked(session: SessionState, request: BlockedRequest) -> None:
    if not request.navigation and is_browser_service(request.target):
        # Chromium's own background call: refused like any other, but not the task's.
        session.background_refused += 1
        return
    # A refused tunnel could be a document: the main-frame recheck decides that.
    session.violate(refused_kind(request), request.target, denies=request.navigation)


def navigated(session: SessionState, page: Page, frame: Frame) -> None:
    url = frame.url
    if frame != page.main_frame:
        scheme = urlsplit(url).scheme.lower()
        if scheme in ("http", "https") and not page_url_allowed(url, session.origins):
            session.violate("frame_blocked", url, denies=True)
        return
    if page is not session.page:
        # A page in the background that left the task's origins is closed, not restored.
        if not page_url_allowed(url, session.origins):
            session.violate("navigation_blocked", url, denies=True)
            session.spawn(page.close())
        return
    # A move within the same document (only the fragment changes) keeps the refs.
    if url.split("#", 1)[0] != session.document_url:
        session.document += 1
        session.document_url = url.split("#", 1)[0]
    if not page_url_allowed(url, session.origins):
        session.violate("navigation_blocked", url, denies=True)
        restore_soon(session)


def restore_soon(session: SessionState) -> None:
    """Take the current page back (`restore`), unless that is under way already."""
    if session.restoring is None or session.restoring.done():
        session.restoring = asyncio.ensure_future(restore(session))
        session.restoring.add_done_callback(log_failure)


async def restore(session: SessionState) -> None:
    """Take the page back to an allowed page (the one before), else to about:blank."""
    with contextlib.suppress(PlaywrightError):
        if page_url_allowed(session.page.url, session.origins):
            return
        with contextlib.suppress(PlaywrightError):
            await session.page.go_back(timeout=3000, wait_until="commit")
        if not page_url_allowed(session.page.url, session.origins):
            await session.page.goto(BLANK, timeout=5000)
