"""One task's browser: a fresh context with one page, behind its own origin proxy.

The proxy is the boundary (nothing it refuses reaches the network). The session adds the
second check on the page itself: after every main-frame navigation the URL is checked
again, and a page that ended up anywhere else (a blob: or data: document, a refused
tunnel's error page) is taken back to an allowed page or to about:blank. Popups are closed
and downloads refused (dialogs are dismissed by Playwright itself, since nothing listens
for them). Every refusal is recorded as evidence, and the task's next call that returns
(the one that caused it, or the one after a page did it alone) ends
`denied`/`origin_blocked`.

Each action (a tool's `run`, a screenshot) first takes a slot of its Chromium process's
admission (`admission.py`); a call turned away there never reaches the page.

A task whose app the gateway provisioned (gateway/sandbox) reaches it through its proxy's
route to the app (`app_link.py`). A call while that app is down (restarting, or gone) ends
`unavailable`/`sandbox_unavailable` before it touches the page, and one during which the
app went down ends so too, whatever the page showed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from playwright.async_api import (
    BrowserContext,
    ConsoleMessage,
    Download,
    Frame,
    Locator,
    Page,
    Request,
)
from playwright.async_api import Error as PlaywrightError

from gateway.errors import ToolFailure
from gateway.identity import TaskIdentity
from gateway.registry import ToolContext
from gateway.results import ErrorCode, ToolStatus
from gateway.store.database import ArtifactRef
from gateway.task_log import Level

from .admission import ActionSlots, Admission
from .app_link import AppLink
from .errors import browser_unavailable, map_playwright_error
from .guard_proxy import BlockedRequest, OriginProxy
from .policy import BLANK, is_browser_service, page_url_allowed
from .processes import BrowserProcess
from .snapshot import PRIVATE_FIELD_VALUES, Refs, Snapshot, build_snapshot, mask_secrets

log = logging.getLogger(__name__)

T = TypeVar("T")
CLOSE_TIMEOUT_S = 10.0
POPUP_WAIT_MS = 1000
SETTLE_TIMEOUT_S = 3.0
SNAPSHOT_TIMEOUT_MS = 30_000
SCREENSHOT_TIMEOUT_MS = 10_000
LOG_TEXT_CHARS = 2000


@dataclass(frozen=True)
class EvidenceSink:
    """Where a session writes what it saw: the gateway's evidence and artifact store."""

    record: Callable[[TaskIdentity, str, Mapping[str, Any]], Awaitable[Any]]
    # For kinds that come in floods (refused requests): aggregated per task and window.
    repeated: Callable[[TaskIdentity, str, Mapping[str, Any]], None]
    # What the page says as it happens (console errors, uncaught errors), for listeners.
    log: Callable[[str, Level, str, dict[str, Any]], None]
    put_artifact: Callable[[TaskIdentity, bytes, str, str], Awaitable[ArtifactRef]]


@dataclass(frozen=True)
class Violation:
    """Something the guard stopped. `denies`: it ends the call that observes it."""

    kind: str
    target: str
    denies: bool
    at: float

    def public(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target[:512], "denies": self.denies}


class BrowserSession:
    def __init__(
        self,
        process: BrowserProcess,
        context: BrowserContext,
        page: Page,
        proxy: OriginProxy,
        sink: EvidenceSink,
        *,
        snapshot_max_chars: int,
        trace: bool,
        keep_screenshots: bool = False,
        admission: ActionSlots | None = None,
    ) -> None:
        self.process = process
        # The action slots of its process, shared with the process's other contexts.
        self.admission: ActionSlots = admission if admission is not None else Admission(1)
        self.context = context
        self.page = page
        self.proxy = proxy
        self.sink = sink
        self.identity: TaskIdentity | None = None
        self.app_link: AppLink | None = None
        self.snapshot_max_chars = snapshot_max_chars
        self.trace = trace
        # Each acting call leaves a screenshot artifact (`browser_screenshots`).
        self.keep_screenshots = keep_screenshots
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self.lost: str | None = None  # why the browser under this session is gone
        self.closed = False
        self.document = 0  # bumped on each new main-frame document: refs of older ones are stale
        self.latest: Snapshot | None = None  # the latest full snapshot
        self.refs = Refs()  # the refs of the current document an agent may use
        # Main-frame navigation requests, and those not over yet (an action's aftermath).
        self.navigations = 0
        self._navigating: set[Request] = set()
        self._settled = asyncio.Event()
        self.blocked_total = 0
        self.background_refused = 0  # Chromium's own calls home, refused
        # Values the caller typed as secrets: no snapshot of this context shows them.
        self.typed_secrets: set[str] = set()
        self.lock = asyncio.Lock()
        self._seq = 0
        self._pending: list[Violation] = []
        self._background: set[asyncio.Future[Any]] = set()
        self._restoring: asyncio.Task[None] | None = None
        self._document_url = BLANK
        self.loss_reported = False
        # Called once when the task's first call is over (the pool's start admission).
        self.on_started: Callable[[], None] | None = None

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        process: BrowserProcess,
        sink: EvidenceSink,
        *,
        snapshot_max_chars: int,
        trace: bool,
        keep_screenshots: bool = False,
        admission: ActionSlots | None = None,
    ) -> BrowserSession:
        """A fresh context and page that can reach nothing until `assign` names a task."""
        holder: list[BrowserSession] = []

        def blocked(request: BlockedRequest) -> None:
            if holder:
                holder[0]._proxy_blocked(request)

        proxy = OriginProxy(blocked)
        await proxy.start(process.jail, process.pid)
        context: BrowserContext | None = None
        try:
            context = await process.browser.new_context(
                proxy={"server": proxy.url},
                accept_downloads=False,
                service_workers="block",
            )
            page = await context.new_page()
        except BaseException:
            if context is not None:
                with contextlib.suppress(Exception):
                    await context.close()
            await proxy.close()
            raise
        session = cls(
            process,
            context,
            page,
            proxy,
            sink,
            snapshot_max_chars=snapshot_max_chars,
            trace=trace,
            keep_screenshots=keep_screenshots,
            admission=admission,
        )
        holder.append(session)
        session._watch()
        return session

    def _watch(self) -> None:
        self.page.on("framenavigated", self._navigated)
        # Only a new document fires it, also one at the same URL (a reload, a second
        # navigate to the page), which `framenavigated` cannot tell from a same-document move.
        self.page.on("domcontentloaded", self._new_document)
        self.page.on("download", self._download)
        self.page.on("crash", lambda _page: self.lose("the task's page crashed"))
        self.page.on("console", self._console)
        self.page.on("pageerror", self._page_error)
        self.page.on("request", self._request)
        self.page.on("requestfinished", self._request_over)
        self.page.on("requestfailed", self._request_over)
        self.context.on("page", self._popup)

    async def assign(self, identity: TaskIdentity, app_link: AppLink | None = None) -> None:
        """Hand this never-used context to one task: from now on its origins are open."""
        assert self.identity is None, "a browser context is handed to one task only"
        self.identity = identity
        self.app_link = app_link
        opener = app_link.opener(identity) if app_link is not None else None
        if opener is not None:
            self.proxy.route(identity.sandbox.app_origin, opener)
        self.proxy.allow(identity.sandbox.origins)
        self.last_used = time.monotonic()
        if self.trace:
            await self.context.tracing.start(screenshots=True, snapshots=True)

    @property
    def origins(self) -> frozenset[str]:
        return self.identity.sandbox.origins if self.identity is not None else frozenset()

    @property
    def url(self) -> str:
        try:
            return self.page.url
        except PlaywrightError:
            return BLANK

    # -- the guard's page-side checks ---------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(coro)
        self._background.add(future)
        future.add_done_callback(self._background.discard)
        future.add_done_callback(_log_failure)

    def _violate(self, kind: str, target: str, *, denies: bool) -> None:
        violation = Violation(kind=kind, target=target, denies=denies, at=time.time())
        self._pending.append(violation)
        self.blocked_total += 1
        if self.identity is not None:
            self.sink.repeated(
                self.identity, "origin_blocked", {**violation.public(), "page": self.url[:512]}
            )

    def _proxy_blocked(self, request: BlockedRequest) -> None:
        if not request.navigation and is_browser_service(request.target):
            # Chromium's own background call: refused like any other, but not the task's.
            self.background_refused += 1
            return
        kind = "navigation_refused" if request.navigation else "request_refused"
        if request.method == "CONNECT":
            kind = "tunnel_refused"
        # A refused tunnel could be a document: the main-frame recheck decides that.
        self._violate(kind, request.target, denies=request.navigation)

    def _navigated(self, frame: Frame) -> None:
        url = frame.url
        if frame != self.page.main_frame:
            scheme = urlsplit(url).scheme.lower()
            if scheme in ("http", "https") and not page_url_allowed(url, self.origins):
                self._violate("frame_blocked", url, denies=True)
            return
        # A move within the same document (only the fragment changes) keeps the refs.
        if url.split("#", 1)[0] != self._document_url:
            self.document += 1
            self._document_url = url.split("#", 1)[0]
        if not page_url_allowed(url, self.origins):
            self._violate("navigation_blocked", url, denies=True)
            self._restore_soon()

    def _console(self, message: ConsoleMessage) -> None:
        if self.identity is not None and message.type in ("error", "warning"):
            level: Level = "error" if message.type == "error" else "warning"
            self.sink.log(
                self.identity.task_id,
                level,
                "browser.console",
                {"text": message.text[:LOG_TEXT_CHARS], "page": self.url[:512]},
            )

    def _page_error(self, error: PlaywrightError) -> None:
        if self.identity is not None:
            self.sink.log(
                self.identity.task_id,
                "error",
                "browser.page",
                {"error": str(error)[:LOG_TEXT_CHARS], "page": self.url[:512]},
            )

    def _new_document(self, _page: Page) -> None:
        self.document += 1

    def _restore_soon(self) -> None:
        if self._restoring is None or self._restoring.done():
            self._restoring = asyncio.ensure_future(self._restore())
            self._restoring.add_done_callback(_log_failure)

    async def _restore(self) -> None:
        """Take the page back to an allowed page (the one before), else to about:blank."""
        with contextlib.suppress(PlaywrightError):
            if page_url_allowed(self.page.url, self.origins):
                return
            with contextlib.suppress(PlaywrightError):
                await self.page.go_back(timeout=3000, wait_until="commit")
            if not page_url_allowed(self.page.url, self.origins):
                await self.page.goto(BLANK, timeout=5000)

    def _download(self, download: Download) -> None:
        self._violate("download_blocked", download.url, denies=True)
        self._spawn(download.cancel())

    def _popup(self, popup: Page) -> None:
        if popup == self.page:
            return
        self._spawn(self._close_popup(popup))

    async def _close_popup(self, popup: Page) -> None:
        target = popup.url
        if target == BLANK:
            # The popup's first navigation may not have started yet: its request says where.
            with contextlib.suppress(PlaywrightError):
                request = await popup.wait_for_event(
                    "request", lambda r: r.is_navigation_request(), timeout=POPUP_WAIT_MS
                )
                target = request.url
        foreign = not page_url_allowed(target, self.origins)
        self._violate("popup_blocked" if foreign else "popup_closed", target, denies=foreign)
        with contextlib.suppress(PlaywrightError):
            await popup.close()

    def lose(self, why: str) -> None:
        """The browser under this session is gone (its first reason is kept)."""
        if self.lost is None:
            self.lost = why

    # -- running a tool's action --------------------------------------------------------

    def _gone(self) -> ToolFailure:
        self.loss_reported = True
        return browser_unavailable(f"the task's browser is gone ({self.lost}); retry")

    def _app_unavailable(self) -> ToolFailure | None:
        if self.app_link is None or self.identity is None:
            return None
        return self.app_link.unavailable(self.identity)

    def release_start(self) -> None:
        release, self.on_started = self.on_started, None
        if release is not None:
            release()

    async def run(self, ctx: ToolContext, action: Callable[[Page], Awaitable[T]]) -> T:
        """Run one call's action on the page, then settle and apply the guard's verdict."""
        try:
            return await self._run(ctx, action)
        finally:
            self.release_start()

    async def _run(self, ctx: ToolContext, action: Callable[[Page], Awaitable[T]]) -> T:
        async with self.lock:
            if self.lost is not None:
                raise self._gone()
            down = self._app_unavailable()
            if down is not None:
                ctx.evidence["page"] = self.url[:2048]
                raise down
            async with self._admitted(ctx.time_left(), ctx.evidence):
                return await self._act(ctx, action)

    async def _act(self, ctx: ToolContext, action: Callable[[Page], Awaitable[T]]) -> T:
        """The action on the page, the settle after it, and the guard's verdict."""
        # The process may have died while the call waited for its slot.
        if self.lost is not None:
            raise self._gone()
        self.last_used = time.monotonic()
        error: ToolFailure | None = None
        result: Any = None
        try:
            result = await action(self.page)
        except ToolFailure as exc:
            error = exc
        except PlaywrightError as exc:
            error = map_playwright_error(exc, browser_alive=self.process.alive)
            if error.code == ErrorCode.BROWSER_UNAVAILABLE:
                self.lose("the browser process ended")
        if self.lost is None:
            await self._settle()
        ctx.evidence["page"] = self.url[:2048]
        if self.lost is not None:
            raise self._gone()
        down = self._app_unavailable()
        if down is not None:
            # The app went down during the action: what the page shows is not the app.
            raise down
        pending, self._pending = self._pending, []
        denied = self._denial(pending)
        if denied is not None:
            raise denied
        if pending:
            # Refused subresources: the page stayed on its origin; the call says so.
            ctx.evidence["blocked"] = [v.public() for v in pending][:20]
        if error is not None:
            raise error
        self.last_used = time.monotonic()
        return result  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def _admitted(
        self, time_left: float, evidence: dict[str, Any] | None = None
    ) -> AsyncIterator[None]:
        """Hold one of the process's action slots for what the block does to the page. A
        call turned away (`overloaded`) has not touched the page; its evidence says so,
        with the page as it was."""
        try:
            waited = await self.admission.acquire(time_left)
        except ToolFailure:
            if evidence is not None:
                evidence["page"] = self.url[:2048]
                evidence["admission"] = {"shed": True}
            raise
        if evidence is not None and waited > 0:
            evidence["admission"] = {"waited_ms": round(waited * 1000, 1)}
        started = time.monotonic()
        try:
            yield
        finally:
            self.admission.release(time.monotonic() - started)

    async def _settle(self) -> None:
        """Let the action's direct consequences (popups, a restore) finish before judging."""
        waiting = [f for f in self._background if not f.done()]
        if self._restoring is not None and not self._restoring.done():
            waiting.append(self._restoring)
        if waiting:
            await asyncio.wait(waiting, timeout=SETTLE_TIMEOUT_S)
        if not page_url_allowed(self.url, self.origins):
            self._restore_soon()
            assert self._restoring is not None
            await asyncio.wait([self._restoring], timeout=SETTLE_TIMEOUT_S)

    def _denial(self, pending: list[Violation]) -> ToolFailure | None:
        """The origin_blocked failure for what the guard stopped since the last call, if any."""
        denying = [v for v in pending if v.denies]
        if not denying:
            return None
        first = denying[0]
        return ToolFailure(
            ToolStatus.DENIED,
            ErrorCode.ORIGIN_BLOCKED,
            f"the task's browser was kept from leaving its allowed origins ({first.kind}: "
            f"{first.target[:200]})",
            details={"blocked": [v.public() for v in pending][:20], "page": self.url[:512]},
        )

    # -- screenshots --------------------------------------------------------------------

    async def screenshot(
        self, timeout_ms: float = SCREENSHOT_TIMEOUT_MS, *, time_left: float = math.inf
    ) -> bytes:
        """A PNG of the page, taken under the session's lock (never mid-action) and in one
        of the process's action slots."""
        async with self.lock:
            if self.lost is not None:
                raise self._gone()
            async with self._admitted(time_left):
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
        """A snapshot of the page (or of one element, or to a depth)."""
        document = self.document
        target = scope if scope is not None else page
        raw = await target.aria_snapshot(mode="ai", depth=depth, timeout=timeout_ms)
        if _TEXTBOX_WITH_VALUE in raw:
            raw = mask_secrets(raw, self.typed_secrets | await _secret_values(page))
        self._seq += 1
        # A navigation during the capture leaves the snapshot's refs stale from the start.
        snap = build_snapshot(
            raw,
            seq=self._seq,
            document=document,
            max_chars=self.snapshot_max_chars,
            full=scope is None and depth is None,
        )
        self.refs.learn(snap)
        if snap.full:
            self.latest = snap
        return snap

    # -- what an action set off -----------------------------------------------------------

    def _request(self, request: Request) -> None:
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self.navigations += 1
            self._navigating.add(request)

    def _request_over(self, request: Request) -> None:
        if request in self._navigating:
            self._navigating.discard(request)
            self._settled.set()

    async def settle_navigation(self, navigations_before: int, timeout_s: float) -> None:
        """When the action started a navigation of the page, wait until it is over: its
        document loaded, or its request refused or failed."""
        if self.navigations == navigations_before:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._navigating:
                    self._settled.clear()
                    await self._settled.wait()
                with contextlib.suppress(PlaywrightError):
                    await self.page.wait_for_load_state("domcontentloaded")

    # -- closing ------------------------------------------------------------------------

    async def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.release_start()
        identity = self.identity
        trace: ArtifactRef | None = None
        if identity is not None and self.trace and self.lost is None:
            trace = await self._save_trace(identity)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.context.close(), CLOSE_TIMEOUT_S)
        await self.proxy.close()
        for future in list(self._background):
            future.cancel()
        if self._restoring is not None:
            self._restoring.cancel()
        if identity is not None:
            data: dict[str, Any] = {
                "reason": reason,
                "blocked": self.blocked_total,
                "background_refused": self.background_refused,
            }
            if trace is not None:
                data["trace"] = trace.public()
            with contextlib.suppress(Exception):
                await self.sink.record(identity, "browser_closed", data)

    async def _save_trace(self, identity: TaskIdentity) -> ArtifactRef | None:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "trace.zip"
                await asyncio.wait_for(self.context.tracing.stop(path=str(path)), CLOSE_TIMEOUT_S)
                data = await asyncio.to_thread(path.read_bytes)
            return await self.sink.put_artifact(identity, data, "trace.zip", "application/zip")
        except Exception as exc:
            log.warning("the trace of task %s could not be kept: %r", identity.task_id, exc)
            return None


# Snapshots without a filled text box (most) skip the look for secret fields.
_TEXTBOX_WITH_VALUE = "]: "


async def _secret_values(page: Page) -> set[str]:
    """The values of the password fields of every frame of the page."""
    values: set[str] = set()
    for found in await asyncio.gather(
        *(frame.evaluate(PRIVATE_FIELD_VALUES) for frame in page.frames), return_exceptions=True
    ):
        if isinstance(found, list):
            values.update(v for v in found if isinstance(v, str))
    return values


def _log_failure(future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None and not isinstance(exc, PlaywrightError):
        log.warning("a browser guard task failed: %r", exc)
