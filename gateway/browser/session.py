"""One task's browser: a fresh context with its pages, behind its own origin proxy.

The proxy is the boundary (nothing it refuses reaches the network). The session adds the
second check on the pages themselves: after every main-frame navigation the URL is checked
again, and a page that ended up anywhere else (a blob: or data: document, a refused
tunnel's error page) is taken back to an allowed page or to about:blank. A popup or new tab
headed for an allowed origin becomes a page of the task (`pages`, one of them current); one
headed anywhere else is closed. A download is kept as an artifact of the task within its
bound. A dialog waits for `browser.handle_dialog` and is dismissed when nobody answers it
in time (`dialogs.py`). Every refusal is recorded as evidence, and the task's next call that
returns (the one that caused it, or the one after a page did it alone) ends
`denied`/`origin_blocked`. What a call set off besides (a page opened or closed, a
download, a dialog dismissed) is added to its result.

Each action (a tool's `run`, a screenshot) first takes a slot of its Chromium process's
admission (`admission.py`); a call turned away there never reaches the page.

The session opens the task's state (`session_state.py`) and composes the parts that take
it: a call's run, settle and verdict (`calls.py`), the page-side checks (`page_guard.py`)
and what they stopped (`violations.py`), popups handed over (`popups.py`), dialogs
(`dialogs.py`), downloads (`downloads.py`), and where evidence and the trace go
(`evidence.py`).

A task whose app the gateway provisioned (gateway/sandbox) reaches it through its proxy's
route to the app (`app_link.py`). A call while that app is down (restarting, or gone) ends
`unavailable`/`sandbox_unavailable` before it touches the page, and one during which the
app went down ends so too, whatever the page showed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from playwright.async_api import BrowserContext, Download, Locator, Page, Request
from playwright.async_api import Error as PlaywrightError

from gateway.core.identity import TaskIdentity
from gateway.core.registry import ToolContext
from gateway.core.storage_state import StorageState
from gateway.core.store.artifacts import ArtifactRef

from . import calls, dialogs, downloads, page_guard, page_log, popups, reading
from .app_link import AppLink
from .calls import SNAPSHOT_TIMEOUT_MS
from .dialog_state import PendingDialog
from .errors import map_playwright_error
from .evidence import CLOSE_TIMEOUT_S, EvidenceSink, save_trace
from .guards import BlockedRequest
from .jail import open_guard
from .policy import BLANK, page_url_allowed
from .processes import BrowserProcess
from .session_state import SessionOptions, SessionState
from .snapshot import Snapshot
from .video import VideoRecording

# What other modules import from here.
__all__ = ["SCREENSHOT_TIMEOUT_MS", "BrowserSession", "EvidenceSink"]

T = TypeVar("T")
SCREENSHOT_TIMEOUT_MS = 10_000


class BrowserSession(SessionState):
    """One task's context and its pages, opened, wired to the parts that watch them, and
    closed; the calls the tools make."""

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        process: BrowserProcess,
        sink: EvidenceSink,
        options: SessionOptions,
        *,
        storage_state: StorageState | None = None,
        record_video: bool = False,
    ) -> BrowserSession:
        """A fresh context and page that can reach nothing until `assign` names a task;
        with a signed-in task's `storage_state` (its cookies and local storage) in it;
        `record_video`: its pages are recorded from the start (for a task that asked)."""
        holder: list[BrowserSession] = []

        def blocked(request: BlockedRequest) -> None:
            if holder:
                page_guard.proxy_blocked(holder[0], request)

        proxy = await open_guard(process.jail, process.pid, blocked)
        context: BrowserContext | None = None
        video = VideoRecording() if record_video else None
        try:
            context = await process.browser.new_context(
                proxy={"server": proxy.url},
                accept_downloads=True,
                service_workers="block",
                storage_state=storage_state.for_playwright() if storage_state else None,  # type: ignore[arg-type]
                record_video_dir=str(video.folder) if video is not None else None,
            )
            page = await context.new_page()
        except BaseException:
            if context is not None:
                with contextlib.suppress(Exception):
                    await context.close()
            await proxy.close()
            if video is not None:
                video.discard()
            raise
        session = cls(
            process,
            context,
            page,
            proxy,
            sink,
            options,
            video=video,
        )
        if storage_state is not None:
            session.state_secrets = storage_state.secrets()
        holder.append(session)
        session._watch()
        return session

    def _watch(self) -> None:
        self.watch_page(self.page)
        self.context.on("page", lambda popup: popups.popup(self, popup, self.watch_page))
        self.context.on(
            "request", lambda request: self.windows.first_request(request, self.pages.values())
        )

    def watch_page(self, page: Page) -> None:
        if self.video is not None:
            self.video.watch(page)
        self.parsed.watch(page)
        page.on("framenavigated", lambda frame: page_guard.navigated(self, page, frame))
        # Only a new document fires it, also one at the same URL (a reload, a second
        # navigate to the page), which `framenavigated` cannot tell from a same-document move.
        page.on("domcontentloaded", self._new_document)
        page.on("download", self._download)
        page.on("crash", self._crashed)
        page.on("console", lambda message: page_log.console(self, message))
        page.on("pageerror", lambda error: page_log.page_error(self, error))
        page.on("request", self._request)
        page.on("requestfinished", self.main_navigations.request_over)
        page.on("requestfailed", self.main_navigations.request_over)
        page.on("response", self.signals.response)
        page.on("dialog", lambda dialog: dialogs.on_dialog(self, page, dialog))
        page.on("close", self._page_closed)
        self.spawn(self.windows.watch(self.context, page))

    def _crashed(self, page: Page) -> None:
        if page is self.page:
            self.lose("the task's page crashed")
        else:
            self.spawn(page.close())

    async def assign(self, identity: TaskIdentity, app_link: AppLink | None = None) -> None:
        """Hand this never-used context to one task: from now on its origins are open."""
        assert self.identity is None, "a browser context is handed to one task only"
        self.identity = identity
        self.app_link = app_link
        opener = app_link.opener(identity) if app_link is not None else None
        if opener is not None:
            self.proxy.route(identity.sandbox.app_origin, opener)
        self.proxy.allow(identity.sandbox.origins)
        await self.proxy.synced()
        self.signals.allowed = lambda url: page_url_allowed(url, self.origins)
        self.last_used = time.monotonic()
        if self.trace:
            await self.context.tracing.start(screenshots=True, snapshots=True)

    def _new_document(self, page: Page) -> None:
        if page is self.page:
            self.document += 1
            self.dialog_state.on_document = 0

    # -- downloads ------------------------------------------------------------------------

    def _download(self, download: Download) -> None:
        self.spawn(downloads.keep_download(self, download))

    # -- pages ------------------------------------------------------------------------------

    async def replace_page(self) -> Page:
        """A fresh page in place of the current one, which is closed: for a page that
        cannot be left (its script never stops opening dialogs, so it never unloads)."""
        old = self.page
        self.opening_own = True
        try:
            new = await self.context.new_page()
        finally:
            self.opening_own = False
        self.watch_page(new)
        self.pages[self.page_id] = new
        self.page = new
        self.document += 1
        self.document_url = BLANK
        self.main_navigations.forget()
        self.latest = None
        self.note("pages_replaced", {"page": self.page_id, "why": "it could not be left"})
        self.spawn(old.close())
        return new

    def _page_closed(self, page: Page) -> None:
        page_id = next((k for k, v in self.pages.items() if v is page), None)
        if page_id is None:
            return
        del self.pages[page_id]
        self.note("pages_closed", {"page": page_id})
        if page is self.page and self.pages:
            # The page the agent was on closed itself: the latest other one is current.
            self.switch_to(list(self.pages)[-1])

    # -- dialogs (`dialogs.py`) ----------------------------------------------------------

    async def dismiss_dialog(self, pending: PendingDialog, why: str) -> None:
        """Dismiss a dialog nobody answers (so it never holds the page), and record it."""
        await dialogs.dismiss(self, pending, why)

    async def race_dialog(self, work: Awaitable[Any]) -> Any:
        """The action's answer, or, when a dialog opens first, what the dialog asks (the
        action waits for it, parked)."""
        return await dialogs.race(self, work)

    # -- running a tool's action --------------------------------------------------------

    async def run(
        self,
        ctx: ToolContext,
        action: Callable[[Page], Awaitable[T]],
        *,
        dialog_aware: bool = False,
        answers_dialog: bool = False,
        keeps_refs: bool = False,
        reads_only: bool = False,
    ) -> T:
        """Run one call's action on the page, then settle and apply the guard's verdict.

        With `dialog_aware`, the action's answer is a dict, and a dialog the action opens ends
        the call at once with what the page asked (the action waits, parked, for
        `browser.handle_dialog`); without, such a dialog is dismissed. A dialog still open
        when a call starts is dismissed first (unless the call `answers_dialog`). Unless
        the call `keeps_refs` (a snapshot of its own), every ref the agent holds resolves.
        A call that `reads_only` (a snapshot: it changes nothing on the page) takes a read
        slot, not an action slot."""
        return await calls.run(
            self,
            ctx,
            action,
            dialog_aware=dialog_aware,
            answers_dialog=answers_dialog,
            keeps_refs=keeps_refs,
            reads_only=reads_only,
        )

    # -- screenshots --------------------------------------------------------------------

    async def screenshot(
        self, timeout_ms: float = SCREENSHOT_TIMEOUT_MS, *, time_left: float = math.inf
    ) -> bytes:
        """A PNG of the page, taken under the session's lock (never mid-action) and in one
        of the process's action slots."""
        async with self.lock:
            if self.lost is not None:
                raise self.gone()
            async with calls.admitted(self, self.admission, time_left):
                try:
                    return await self.page.screenshot(type="png", timeout=timeout_ms)
                except PlaywrightError as exc:
                    raise map_playwright_error(exc, browser_alive=self.process.alive) from None

    async def keep_screenshot(
        self, identity: TaskIdentity, *, time_left: float = math.inf
    ) -> ArtifactRef:
        """A screenshot kept as an artifact of the task."""
        return await self.keep_png(identity, await self.screenshot(time_left=time_left))

    async def keep_png(self, identity: TaskIdentity, data: bytes) -> ArtifactRef:
        return await self.sink.put_artifact(identity, data, "screenshot.png", "image/png")

    # -- snapshots ----------------------------------------------------------------------

    async def take_snapshot(
        self,
        page: Page,
        *,
        scope: Locator | None = None,
        depth: int | None = None,
        timeout_ms: float = SNAPSHOT_TIMEOUT_MS,
    ) -> Snapshot:
        """A snapshot of the page (or of one element, or to a depth): `reading.py`."""
        return await reading.take_snapshot(
            self, page, scope=scope, depth=depth, timeout_ms=timeout_ms
        )

    # -- what an action set off -----------------------------------------------------------

    def _request(self, request: Request) -> None:
        self.frame_targets.request(request)
        self.main_navigations.request(request, self.page.main_frame)

    @property
    def navigations(self) -> int:
        """Main-frame navigation requests of the current page so far."""
        return self.main_navigations.count

    @property
    def navigation_method(self) -> str:
        """The method of the request of the page's latest main-frame document (a
        redirect's last hop): a POST is a form the server answered with a page."""
        return self.main_navigations.method

    async def settle_navigation(self, navigations_before: int, timeout_s: float) -> None:
        """When the action started a navigation of the page, wait until it is over: its
        document loaded, or its request refused or failed."""
        if self.navigations != navigations_before:
            await self.navigation_over(timeout_s)

    async def navigation_over(self, timeout_s: float) -> None:
        """Wait until no navigation of the page is under way and its document is parsed."""
        await self.main_navigations.over(timeout_s, lambda: self.page)

    # -- closing ------------------------------------------------------------------------

    async def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.release_start()
        identity = self.identity
        trace: ArtifactRef | None = None
        if identity is not None and self.trace and self.lost is None:
            trace = await save_trace(
                self.context,
                list(self.pages.values()),
                self.held_secrets,
                self.typed_secrets | self.state_secrets,
                drop_images=self.visible_secrets,
                identity=identity,
                sink=self.sink,
            )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.context.close(), CLOSE_TIMEOUT_S)
        await self.proxy.close()
        videos: dict[str, Any] = {}
        if self.video is not None:
            # Finished by the context's closing; a lost browser's are gone with it.
            if identity is not None and self.lost is None:
                videos = await self.video.keep(identity, self.sink.put_artifact)
            self.video.discard()
        for future in list(self.background):
            future.cancel()
        if self.restoring is not None:
            self.restoring.cancel()
        if identity is not None:
            data: dict[str, Any] = {
                "reason": reason,
                "blocked": self.blocked_total,
                "background_refused": self.background_refused,
            }
            if trace is not None:
                data["trace"] = trace.public()
            data.update(videos)
            with contextlib.suppress(Exception):
                await self.sink.record(identity, "browser_closed", data)
