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

A task whose app the gateway provisioned (gateway/sandbox) reaches it through its proxy's
route to the app (`app_link.py`). A call while that app is down (restarting, or gone) ends
`unavailable`/`sandbox_unavailable` before it touches the page, and one during which the
app went down ends so too, whatever the page showed.
"""

from __future__ import annotations

import asyncio
import base64
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
    Dialog,
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
from gateway.storage_state import StorageState
from gateway.store.artifacts import ArtifactRef
from gateway.task_log import Level

from . import dialogs, trace_scrub
from .admission import ActionSlots, Admission
from .app_link import AppLink
from .dialogs import PendingDialog
from .errors import browser_unavailable, first_line, map_playwright_error
from .frames import FrameTargets
from .guard_proxy import BlockedRequest, OriginProxy
from .policy import BLANK, is_browser_service, page_url_allowed
from .processes import BrowserProcess
from .signals import Signals
from .snapshot import (
    PRIVATE_FIELD_VALUES,
    Refs,
    Snapshot,
    build_snapshot,
    empty_frames,
    mark_refused_frames,
    mask_secrets,
)
from .video import VideoRecording

log = logging.getLogger(__name__)

T = TypeVar("T")
CLOSE_TIMEOUT_S = 10.0
POPUP_WAIT_MS = 1000
# How long an action that opened a window waits for it to become a page of the task (or
# be refused), so its own answer says so. Playwright hands a popup over only once it has
# set it up and its first navigation is over: on a loaded machine, seconds after the click.
POPUP_REGISTER_S = 10.0
SETTLE_TIMEOUT_S = 3.0
SNAPSHOT_TIMEOUT_MS = 30_000
SCREENSHOT_TIMEOUT_MS = 10_000
LOG_TEXT_CHARS = 2000
# Pages a task may hold at once (its first and the popups it kept); a popup beyond is closed.
MAX_PAGES = 8
# Dialogs dismissed while a call leaves the page, past which the page is taken as stuck.
STUCK_AFTER_DIALOGS = 5
DOWNLOAD_TIMEOUT_S = 60.0
DEFAULT_DOWNLOAD_MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class EvidenceSink:
    """Where a session writes what it saw: the gateway's evidence and artifact store."""

    record: Callable[[TaskIdentity, str, Mapping[str, Any]], Awaitable[Any]]
    # For kinds that come in floods (refused requests): aggregated per task and window.
    repeated: Callable[[TaskIdentity, str, Mapping[str, Any]], None]
    # What the page says as it happens (console errors, uncaught errors), for listeners.
    log: Callable[[str, Level, str, dict[str, Any]], None]
    put_artifact: Callable[[TaskIdentity, bytes, str, str], Awaitable[ArtifactRef]]
    # An artifact by id, whoever's (uploads.py checks it is the task's own), and its bytes.
    get_artifact: Callable[[str], Awaitable[ArtifactRef]] | None = None
    read_artifact: Callable[[ArtifactRef], Awaitable[bytes]] | None = None


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
        reads: ActionSlots | None = None,
        video: VideoRecording | None = None,
    ) -> None:
        self.process = process
        # The pages' video, for a task that asked for one (`video.py`).
        self.video = video
        # The action slots of its process, shared with the process's other contexts.
        self.admission: ActionSlots = admission if admission is not None else Admission(1)
        # The read slots of its process: a snapshot waits only for other snapshots.
        self.reads: ActionSlots = reads if reads is not None else Admission(1)
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
        # Pages of the task by id (`p1` is the first); `page` is the current one.
        self.pages: dict[str, Page] = {"p1": page}
        self.page_id = "p1"
        self._page_seq = 1
        # What happened besides the call's own action, for the result of the call that
        # observes it: pages opened or closed, downloads, dialogs dismissed.
        self._notes: dict[str, list[dict[str, Any]]] = {}
        self.dialog: PendingDialog | None = None
        self._dialog_opened = asyncio.Event()
        self._dialogs_on_document = 0
        # An action a dialog interrupted: it goes on once the dialog is answered.
        self.parked: asyncio.Future[Any] | None = None
        self._in_call = False
        self._dialog_aware = False
        # A call that leaves the page: only the page's own "leave this page?" is shown.
        self.leaving = False
        # Set when the page being left keeps opening dialogs: it will not unload.
        self.stuck = asyncio.Event()
        self._dismissed_leaving = 0
        self._opening_own = False
        self.download_max_bytes = DEFAULT_DOWNLOAD_MAX_BYTES
        # Password-field values the page held, seen by snapshots: kept out of the trace.
        self.held_secrets: set[str] = set()
        # Secrets typed into fields that show them (secret: true on a plain text box): a
        # trace's screenshots would show them, so a trace of such a task keeps none.
        self.visible_secrets = False
        self.signals = Signals()
        # Playwright resolves a ref against the page's latest snapshot only: after one of
        # part of the page, a ref of the whole page's would not resolve until the next.
        self._partial_map = False
        self._first_targets: dict[Page, str] = {}
        # Where each frame was headed: a refused one shows as such in snapshots.
        self.frame_targets = FrameTargets()
        self._popup_seen = asyncio.Event()
        # Windows the pages opened (Chromium says so at once), and those handed over since.
        self._windows_opened = 0
        self._windows_arrived = 0
        self._window_arrived = asyncio.Event()
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
        # The method of the request of the page's latest main-frame document (a redirect's
        # last hop): a POST is a form the server answered with a page (its errors, a
        # confirmation step) rather than a redirect to its result.
        self.navigation_method = "GET"
        self.blocked_total = 0
        self.background_refused = 0  # Chromium's own calls home, refused
        # Values the caller typed as secrets: no snapshot of this context shows them.
        self.typed_secrets: set[str] = set()
        # A signed-in task's cookie and local-storage values: shown and kept nowhere.
        self.state_secrets: frozenset[str] = frozenset()
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
        reads: ActionSlots | None = None,
        storage_state: StorageState | None = None,
        record_video: bool = False,
    ) -> BrowserSession:
        """A fresh context and page that can reach nothing until `assign` names a task;
        with a signed-in task's `storage_state` (its cookies and local storage) in it;
        `record_video`: its pages are recorded from the start (for a task that asked)."""
        holder: list[BrowserSession] = []

        def blocked(request: BlockedRequest) -> None:
            if holder:
                holder[0]._proxy_blocked(request)

        proxy = OriginProxy(blocked)
        await proxy.start(process.jail, process.pid)
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
            snapshot_max_chars=snapshot_max_chars,
            trace=trace,
            keep_screenshots=keep_screenshots,
            admission=admission,
            reads=reads,
            video=video,
        )
        if storage_state is not None:
            session.state_secrets = storage_state.secrets()
        holder.append(session)
        session._watch()
        return session

    def _watch(self) -> None:
        self._watch_page(self.page)
        self.context.on("page", self._popup)
        self.context.on("request", self._first_request)

    def _first_request(self, request: Request) -> None:
        """Where a popup went first, seen before the popup is (Playwright hands a popup
        over once its first navigation is over, which the guard may have refused)."""
        if not request.is_navigation_request():
            return
        with contextlib.suppress(PlaywrightError):
            page = request.frame.page
            if page not in self.pages.values() and page not in self._first_targets:
                self._first_targets[page] = request.url
                self._popup_seen.clear()

    def _watch_page(self, page: Page) -> None:
        if self.video is not None:
            self.video.watch(page)
        page.on("framenavigated", lambda frame: self._navigated(page, frame))
        # Only a new document fires it, also one at the same URL (a reload, a second
        # navigate to the page), which `framenavigated` cannot tell from a same-document move.
        page.on("domcontentloaded", self._new_document)
        page.on("download", self._download)
        page.on("crash", self._crashed)
        page.on("console", self._console)
        page.on("pageerror", self._page_error)
        page.on("request", self._request)
        page.on("requestfinished", self._request_over)
        page.on("requestfailed", self._request_over)
        page.on("response", self.signals.response)
        page.on("dialog", lambda dialog: self._on_dialog(page, dialog))
        page.on("close", self._page_closed)
        self._spawn(self._watch_windows(page))

    async def _watch_windows(self, page: Page) -> None:
        """Count the windows the page opens. Chromium's `Page.windowOpen` comes as the
        page calls `window.open` (or follows a `target=_blank` link), before the action
        that did it returns; Playwright's popup comes once set up and loaded, which under
        load is long after. Without the count, an action cannot tell that a popup is on its
        way. A browser without the event (not Chromium) leaves the popups uncounted."""
        with contextlib.suppress(PlaywrightError):
            cdp = await self.context.new_cdp_session(page)
            cdp.on("Page.windowOpen", self._window_opening)
            await cdp.send("Page.enable")

    def _window_opening(self, _event: Any) -> None:
        self._windows_opened += 1

    def _crashed(self, page: Page) -> None:
        if page is self.page:
            self.lose("the task's page crashed")
        else:
            self._spawn(page.close())

    async def assign(self, identity: TaskIdentity, app_link: AppLink | None = None) -> None:
        """Hand this never-used context to one task: from now on its origins are open."""
        assert self.identity is None, "a browser context is handed to one task only"
        self.identity = identity
        self.app_link = app_link
        opener = app_link.opener(identity) if app_link is not None else None
        if opener is not None:
            self.proxy.route(identity.sandbox.app_origin, opener)
        self.proxy.allow(identity.sandbox.origins)
        self.signals.allowed = lambda url: page_url_allowed(url, self.origins)
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

    def _navigated(self, page: Page, frame: Frame) -> None:
        url = frame.url
        if frame != page.main_frame:
            scheme = urlsplit(url).scheme.lower()
            if scheme in ("http", "https") and not page_url_allowed(url, self.origins):
                self._violate("frame_blocked", url, denies=True)
            return
        if page is not self.page:
            # A page in the background that left the task's origins is closed, not restored.
            if not page_url_allowed(url, self.origins):
                self._violate("navigation_blocked", url, denies=True)
                self._spawn(page.close())
            return
        # A move within the same document (only the fragment changes) keeps the refs.
        if url.split("#", 1)[0] != self._document_url:
            self.document += 1
            self._document_url = url.split("#", 1)[0]
        if not page_url_allowed(url, self.origins):
            self._violate("navigation_blocked", url, denies=True)
            self._restore_soon()

    def _console(self, message: ConsoleMessage) -> None:
        self.signals.console(message, self.typed_secrets | self.state_secrets)
        if self.identity is not None and message.type in ("error", "warning"):
            level: Level = "error" if message.type == "error" else "warning"
            self.sink.log(
                self.identity.task_id,
                level,
                "browser.console",
                {"text": self._unsecret(message.text)[:LOG_TEXT_CHARS], "page": self.url[:512]},
            )

    def _page_error(self, error: PlaywrightError) -> None:
        self.signals.page_error(str(error), self.url, self.typed_secrets | self.state_secrets)
        if self.identity is not None:
            self.sink.log(
                self.identity.task_id,
                "error",
                "browser.page",
                {"error": self._unsecret(str(error))[:LOG_TEXT_CHARS], "page": self.url[:512]},
            )

    def _unsecret(self, text: str) -> str:
        """`text` without the values typed as secrets or given in the task's storage
        state: the task's log goes to its agent's client as it happens."""
        for value in self.typed_secrets | self.state_secrets:
            if value:
                text = text.replace(value, "[secret]")
        return text

    def _new_document(self, page: Page) -> None:
        if page is self.page:
            self.document += 1
            self._dialogs_on_document = 0

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

    def note(self, kind: str, item: dict[str, Any]) -> None:
        """Something the next call's result says besides its own answer."""
        self._notes.setdefault(kind, []).append(item)

    def _report(self, result: Any) -> None:
        notes, self._notes = self._notes, {}
        if isinstance(result, dict):
            for kind, items in notes.items():
                result[kind] = items[:20]

    # -- downloads ------------------------------------------------------------------------

    def _downloaded(self, got: Any) -> tuple[str | None, bytes]:
        """What the page's reading of a download gave: its bytes, or why none are kept.
        The bound is checked here again: the reading runs in the page's own world, whose
        functions the page may have replaced."""
        limit = self.download_max_bytes
        if not isinstance(got, dict):
            return "its reading gave no bytes", b""
        if "over" in got:
            return f"it is over the bound of {limit} bytes", b""
        if "status" in got:
            return f"the app answered {str(got['status'])[:40]}", b""
        encoded = got.get("data")
        # Base64 holds 3 bytes in 4 characters: a longer text is over the bound as it is.
        if not isinstance(encoded, str) or len(encoded) > 4 * (limit // 3 + 1):
            return f"it is over the bound of {limit} bytes", b""
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:
            return "its reading gave no bytes", b""
        if len(data) > limit:
            return f"it is over the bound of {limit} bytes", b""
        return None, data

    def _download(self, download: Download) -> None:
        self._spawn(self._keep_download(download))

    async def _keep_download(self, download: Download) -> None:
        """The downloaded file as an artifact of the task, when it is within the bound and
        the task's artifact quota; else it is refused, and the refusal recorded.

        Chromium's own download is cancelled (a jailed Chromium's user may not write where
        Playwright keeps downloads): the page that started it reads the file again, through
        the guard, from its own origin (or its blob: or data: URL), bounded as it streams."""
        identity = self.identity
        url = download.url
        name = download.suggested_filename[:200] or "download"
        with contextlib.suppress(PlaywrightError):
            await download.cancel()
        refusal: str | None = None
        data = b""
        if not (page_url_allowed(url, self.origins) or url.startswith(("blob:", "data:"))):
            refusal = "its URL is not on the task's origins"
        else:
            try:
                got = await asyncio.wait_for(
                    download.page.evaluate(
                        _READ_DOWNLOAD, {"url": url, "limit": self.download_max_bytes}
                    ),
                    DOWNLOAD_TIMEOUT_S,
                )
            except TimeoutError:
                refusal = "it did not finish in time"
            except PlaywrightError as exc:
                refusal = f"it could not be read: {first_line(exc)}"
            else:
                refusal, data = self._downloaded(got)
        if identity is None:
            return
        if refusal is None:
            try:
                ref = await self.sink.put_artifact(identity, data, name, "application/octet-stream")
            except ToolFailure as exc:
                refusal = exc.message
            except Exception as exc:  # the store's quota, or the store itself
                refusal = str(exc)[:300]
            else:
                kept = {"url": url[:512], "name": name, "artifact": ref.public()}
                self.note("downloads", kept)
                await self.sink.record(identity, "download_kept", kept)
                return
        refused = {"url": url[:512], "name": name, "refused": refusal}
        self.note("downloads", refused)
        await self.sink.record(identity, "download_refused", refused)

    # -- pages ------------------------------------------------------------------------------

    def _popup(self, popup: Page) -> None:
        self._popup_seen.set()
        if popup in self.pages.values() or self._opening_own:
            return
        self._windows_arrived += 1
        self._window_arrived.set()
        if len(self.pages) >= MAX_PAGES:
            self._spawn(self._refuse_popup(popup, f"the task holds {MAX_PAGES} pages already"))
            return
        self._page_seq += 1
        page_id = f"p{self._page_seq}"
        self.pages[page_id] = popup
        self._watch_page(popup)
        self._spawn(self._adopt_popup(page_id, popup))

    async def _popup_target(self, popup: Page) -> str:
        first = self._first_targets.pop(popup, None)
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

    async def _refuse_popup(self, popup: Page, why: str) -> None:
        target = await self._popup_target(popup)
        self._violate("popup_closed", target, denies=False)
        self.note("pages_refused", {"url": target[:512], "why": why})
        with contextlib.suppress(PlaywrightError):
            await popup.close()

    async def _adopt_popup(self, page_id: str, popup: Page) -> None:
        """A popup on an allowed origin stays, as a page of the task; one headed anywhere
        else is closed and is a refusal."""
        target = await self._popup_target(popup)
        if not page_url_allowed(target, self.origins):
            self.pages.pop(page_id, None)
            self._violate("popup_blocked", target, denies=True)
            with contextlib.suppress(PlaywrightError):
                await popup.close()
            return
        opened = {"page": page_id, "url": target[:512]}
        self.note("pages_opened", opened)
        if self.identity is not None:
            await self.sink.record(self.identity, "page_opened", opened)

    def page_list(self) -> list[dict[str, Any]]:
        return [
            {"page": page_id, "url": _url(page)[:512], "current": page is self.page}
            for page_id, page in self.pages.items()
        ]

    def switch_to(self, page_id: str) -> None:
        """Make another page of the task the current one: refs of the one before are stale."""
        page = self.pages[page_id]
        if page is self.page:
            return
        self.page, self.page_id = page, page_id
        self.document += 1
        self._document_url = _url(page).split("#", 1)[0]
        self._navigating.clear()
        self.latest = None

    async def replace_page(self) -> Page:
        """A fresh page in place of the current one, which is closed: for a page that
        cannot be left (its script never stops opening dialogs, so it never unloads)."""
        old = self.page
        self._opening_own = True
        try:
            new = await self.context.new_page()
        finally:
            self._opening_own = False
        self._watch_page(new)
        self.pages[self.page_id] = new
        self.page = new
        self.document += 1
        self._document_url = BLANK
        self._navigating.clear()
        self.latest = None
        self.note("pages_replaced", {"page": self.page_id, "why": "it could not be left"})
        self._spawn(old.close())
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

    # -- dialogs ------------------------------------------------------------

    def _on_dialog(self, page: Page, dialog: Dialog) -> None:
        pending = PendingDialog(dialog, time.time())
        if page is not self.page:
            self._spawn(self.dismiss_dialog(pending, "it opened on a page in the background"))
            return
        if self._dialogs_on_document >= dialogs.MAX_DIALOGS_PER_DOCUMENT:
            self._spawn(self.dismiss_dialog(pending, "the page opened too many dialogs"))
            return
        if self._in_call and not self._dialog_aware:
            self._spawn(self.dismiss_dialog(pending, "it opened during a call that cannot show it"))
            return
        if self._in_call and self.leaving and dialog.type != "beforeunload":
            self._spawn(self.dismiss_dialog(pending, "it opened while the page was being left"))
            self._dismissed_leaving += 1
            if self._dismissed_leaving >= STUCK_AFTER_DIALOGS:
                self.stuck.set()
            return
        self._dialogs_on_document += 1
        if self.dialog is not None:
            self._spawn(self.dismiss_dialog(self.dialog, "another dialog followed it"))
        self.dialog = pending
        self._dialog_opened.set()
        asyncio.get_running_loop().call_later(
            dialogs.DIALOG_TIMEOUT_S, self._expire_dialog, pending
        )

    def _expire_dialog(self, pending: PendingDialog) -> None:
        if self.dialog is pending:
            self._spawn(
                self.dismiss_dialog(
                    pending, f"nobody answered it within {dialogs.DIALOG_TIMEOUT_S:g} s"
                )
            )

    async def dismiss_dialog(self, pending: PendingDialog, why: str) -> None:
        """Dismiss a dialog nobody answers (so it never holds the page), and record it."""
        if self.dialog is pending:
            self.dialog = None
        with contextlib.suppress(PlaywrightError):
            await pending.dialog.dismiss()
        dismissed = {**pending.public(), "why": why}
        self.note("dialogs_dismissed", dismissed)
        if self.identity is not None:
            self.sink.repeated(self.identity, "dialog_dismissed", {**dismissed, "page": self.url})

    def take_dialog(self) -> PendingDialog | None:
        pending, self.dialog = self.dialog, None
        return pending

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
        try:
            if not keeps_refs:
                action = self._with_refs(action)
            lane = self.reads if reads_only else self.admission
            return await self._run(ctx, action, dialog_aware, answers_dialog, lane)
        finally:
            self.release_start()

    async def _run(
        self,
        ctx: ToolContext,
        action: Callable[[Page], Awaitable[T]],
        dialog_aware: bool,
        answers_dialog: bool,
        lane: ActionSlots,
    ) -> T:
        async with self.lock:
            if self.lost is not None:
                raise self._gone()
            down = self._app_unavailable()
            if down is not None:
                ctx.evidence["page"] = self.url[:2048]
                raise down
            async with self._admitted(lane, ctx.time_left(), ctx.evidence):
                self._in_call, self._dialog_aware = True, dialog_aware
                self._dismissed_leaving = 0
                self.stuck.clear()
                try:
                    return await self._act(ctx, action, answers_dialog)
                finally:
                    self._in_call = self._dialog_aware = self.leaving = False

    def _with_refs(self, action: Callable[[Page], Awaitable[T]]) -> Callable[[Page], Awaitable[T]]:
        async def restored(page: Page) -> T:
            if self._partial_map:
                # Taken again, whole, so the refs of the whole page's snapshot resolve (the
                # elements keep their refs from one snapshot to the next).
                await page.aria_snapshot(mode="ai", timeout=SNAPSHOT_TIMEOUT_MS)
                self._partial_map = False
            return await action(page)

        return restored

    async def _before(self, answers_dialog: bool) -> None:
        """A dialog left open, and an action it had parked, end before the next call acts."""
        if answers_dialog:
            return
        if self.dialog is not None:
            await self.dismiss_dialog(self.dialog, "the next call came before it was answered")
        parked, self.parked = self.parked, None
        if parked is not None and not parked.done():
            await asyncio.wait([parked], timeout=SETTLE_TIMEOUT_S)

    async def race_dialog(self, work: Awaitable[Any]) -> Any:
        """The action's answer, or, when a dialog opens first, what the dialog asks (the
        action waits for it, parked)."""
        self._dialog_opened.clear()
        task = asyncio.ensure_future(work)
        opened = asyncio.ensure_future(self._dialog_opened.wait())
        try:
            await asyncio.wait({task, opened}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        if task.done() or self.dialog is None:
            return await task
        task.add_done_callback(_quiet)
        self.parked = task
        return {
            "dialog": self.dialog.public(),
            "next": "the page waits for an answer: browser.handle_dialog accepts or "
            f"dismisses it (dismissed on its own after {dialogs.DIALOG_TIMEOUT_S:g} s)",
        }

    async def _act(
        self, ctx: ToolContext, action: Callable[[Page], Awaitable[T]], answers_dialog: bool
    ) -> T:
        """The action on the page, the settle after it, and the guard's verdict."""
        # The process may have died while the call waited for its slot.
        if self.lost is not None:
            raise self._gone()
        self.last_used = time.monotonic()
        error: ToolFailure | None = None
        result: Any = None
        try:
            await self._before(answers_dialog)
            if self._dialog_aware and not answers_dialog:
                result = await self.race_dialog(action(self.page))
            else:
                result = await action(self.page)
        except ToolFailure as exc:
            error = exc
        except PlaywrightError as exc:
            error = map_playwright_error(exc, browser_alive=self.process.alive)
            if error.code == ErrorCode.BROWSER_UNAVAILABLE:
                self.lose("the browser process ended")
        if self.lost is None and self.dialog is None:
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
        self._report(result)
        self.last_used = time.monotonic()
        return result  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def _admitted(
        self, lane: ActionSlots, time_left: float, evidence: dict[str, Any] | None = None
    ) -> AsyncIterator[None]:
        """Hold one of the process's slots of `lane` (actions or reads) for what the block
        does to the page. A call turned away (`overloaded`) has not touched the page; its
        evidence says so, with the page as it was."""
        try:
            waited = await lane.acquire(time_left)
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
            lane.release(time.monotonic() - started)

    async def _settle(self) -> None:
        """Let the action's direct consequences (popups, a restore) finish before judging."""
        await self._windows_handed_over()
        # A popup's first request has been seen, the popup itself not yet: it is coming.
        if self._first_targets:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._popup_seen.wait(), POPUP_WAIT_MS / 1000)
        waiting = [f for f in self._background if not f.done()]
        if self._restoring is not None and not self._restoring.done():
            waiting.append(self._restoring)
        if waiting:
            await asyncio.wait(waiting, timeout=SETTLE_TIMEOUT_S)
        if not page_url_allowed(self.url, self.origins):
            self._restore_soon()
            assert self._restoring is not None
            await asyncio.wait([self._restoring], timeout=SETTLE_TIMEOUT_S)

    async def _windows_handed_over(self) -> None:
        """Wait, bounded, until every window the pages opened has come as a popup."""
        if self._windows_arrived >= self._windows_opened:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(POPUP_REGISTER_S):
                while self._windows_arrived < self._windows_opened:
                    self._window_arrived.clear()
                    await self._window_arrived.wait()
        # One that never came (a named window reused, one closed at once) is not waited
        # for again by every later call.
        self._windows_arrived = max(self._windows_arrived, self._windows_opened)

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
            async with self._admitted(self.admission, time_left):
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
        # A page still being parsed (a popup just opened) is read once its DOM is: else its
        # own DOMContentLoaded, a new document to the refs, would make this one stale.
        with contextlib.suppress(PlaywrightError):
            await page.wait_for_load_state("domcontentloaded", timeout=timeout_ms)
        document = self.document
        target = scope if scope is not None else page
        raw = await target.aria_snapshot(mode="ai", depth=depth, timeout=timeout_ms)
        if empty_frames(raw):
            refused = await self.frame_targets.refused(
                page, raw, lambda url: page_url_allowed(url, self.origins)
            )
            raw = mark_refused_frames(raw, refused)
        if _TEXTBOX_WITH_VALUE in raw:
            held = await _secret_values(page)
            self.held_secrets |= held
            raw = mask_secrets(raw, self.typed_secrets | held)
        for value in self.state_secrets:
            # Wherever the page shows one (a token printed in its text, a field's value);
            # then the trace's screenshots would show it too, so it keeps none.
            if value in raw:
                raw = raw.replace(value, "[secret]")
                self.visible_secrets = True
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
        self._partial_map = not snap.full
        if snap.full:
            self.latest = snap
        return snap

    # -- what an action set off -----------------------------------------------------------

    def _request(self, request: Request) -> None:
        self.frame_targets.request(request)
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self.navigations += 1
            self.navigation_method = request.method
            self._navigating.add(request)

    def _request_over(self, request: Request) -> None:
        if request in self._navigating:
            self._navigating.discard(request)
            self._settled.set()

    async def settle_navigation(self, navigations_before: int, timeout_s: float) -> None:
        """When the action started a navigation of the page, wait until it is over: its
        document loaded, or its request refused or failed."""
        if self.navigations != navigations_before:
            await self.navigation_over(timeout_s)

    async def navigation_over(self, timeout_s: float) -> None:
        """Wait until no navigation of the page is under way and its document is parsed."""
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
        videos: dict[str, Any] = {}
        if self.video is not None:
            # Finished by the context's closing; a lost browser's are gone with it.
            if identity is not None and self.lost is None:
                videos = await self.video.keep(identity, self.sink.put_artifact)
            self.video.discard()
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
            data.update(videos)
            with contextlib.suppress(Exception):
                await self.sink.record(identity, "browser_closed", data)

    async def _save_trace(self, identity: TaskIdentity) -> ArtifactRef | None:
        """The context's trace, with every secret the task typed or its pages held taken
        out (`trace_scrub`): the artifact keeps nothing the evidence redacts."""
        try:
            for page in list(self.pages.values()):
                with contextlib.suppress(TimeoutError):
                    self.held_secrets |= await asyncio.wait_for(_secret_values(page), 2.0)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "trace.zip"
                await asyncio.wait_for(self.context.tracing.stop(path=str(path)), CLOSE_TIMEOUT_S)
                data = await asyncio.to_thread(path.read_bytes)
            data = await asyncio.to_thread(
                trace_scrub.scrub,
                data,
                self.typed_secrets | self.held_secrets | self.state_secrets,
                drop_images=self.visible_secrets,
            )
            return await self.sink.put_artifact(identity, data, "trace.zip", "application/zip")
        except Exception as exc:
            log.warning("the trace of task %s could not be kept: %r", identity.task_id, exc)
            return None


# Reads a download's bytes in the page that started it, stopping past `limit`.
_READ_DOWNLOAD = """async ({url, limit}) => {
  const response = await fetch(url, {credentials: "include"});
  if (!response.ok) return {status: response.status};
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) { await reader.cancel(); return {over: size}; }
    chunks.push(value);
  }
  let text = "";
  for (const chunk of chunks) {
    for (let i = 0; i < chunk.length; i += 0x8000) {
      text += String.fromCharCode.apply(null, chunk.subarray(i, i + 0x8000));
    }
  }
  return {data: btoa(text)};
}"""

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


def _url(page: Page) -> str:
    try:
        return page.url
    except PlaywrightError:
        return BLANK


def _quiet(future: asyncio.Future[Any]) -> None:
    """A parked action's outcome nobody waits for any more."""
    if not future.cancelled():
        future.exception()


def _log_failure(future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None and not isinstance(exc, PlaywrightError):
        log.warning("a browser guard task failed: %r", exc)
