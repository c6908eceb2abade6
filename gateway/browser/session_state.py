"""What one task's browser holds, which the parts of its browser read and change.

`SessionState` is the task's context, its pages (one of them current) and everything kept
about them between calls: the dialog waiting for an answer, what the guard stopped since the
last call, the refs an agent may use, what a call set off besides its own action (`note`),
and why the browser under it is gone (`lose`). The parts (`calls.py`, `page_guard.py`,
`popups.py`, `dialogs.py`, `downloads.py`, `reading.py`, `page_log.py`) take it and
never the session itself, which opens, wires and closes it (`session.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.parts import BrowserToolsConfig

from .admission import ActionSlots, Admission
from .app_link import AppLink
from .dialog_state import DialogState, PendingDialog
from .errors import browser_unavailable
from .evidence import EvidenceSink
from .frames import FrameTargets
from .guards import ContextGuard
from .navigation import Navigations
from .parsed import ParsedPages
from .policy import BLANK
from .processes import BrowserProcess
from .signals import Signals
from .snapshot import Refs, Snapshot
from .video import VideoRecording
from .violations import Violation
from .windows import Windows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionOptions:
    """What the pool gives every session it opens: the bounds of its snapshots, whether it
    keeps a trace and screenshots, and its process's action and read slots (one of each of
    its own when none is given)."""

    snapshot_max_chars: int
    trace: bool
    keep_screenshots: bool = False
    admission: ActionSlots | None = None
    reads: ActionSlots | None = None


class SessionState:
    """One task's context and its pages: the state the parts of the task's browser read
    and change, and the small rules of keeping it."""

    def __init__(
        self,
        process: BrowserProcess,
        context: BrowserContext,
        page: Page,
        proxy: ContextGuard,
        sink: EvidenceSink,
        options: SessionOptions,
        *,
        video: VideoRecording | None = None,
    ) -> None:
        self.process = process
        # The pages' video, for a task that asked for one (`video.py`).
        self.video = video
        # The action slots of its process, shared with the process's other contexts.
        self.admission: ActionSlots = options.admission or Admission(1)
        # The read slots of its process: a snapshot waits only for other snapshots.
        self.reads: ActionSlots = options.reads or Admission(1)
        self.context = context
        self.page = page
        self.proxy = proxy
        self.sink = sink
        self.identity: TaskIdentity | None = None
        self.app_link: AppLink | None = None
        self.snapshot_max_chars = options.snapshot_max_chars
        self.trace = options.trace
        # Each acting call leaves a screenshot artifact (`browser_screenshots`).
        self.keep_screenshots = options.keep_screenshots
        # Pages of the task by id (`p1` is the first); `page` is the current one.
        self.pages: dict[str, Page] = {"p1": page}
        self.page_id = "p1"
        self._page_seq = 1
        # What happened besides the call's own action, for the result of the call that
        # observes it: pages opened or closed, downloads, dialogs dismissed.
        self._notes: dict[str, list[dict[str, Any]]] = {}
        self.dialog: PendingDialog | None = None
        self.dialog_state = DialogState()
        # An action a dialog interrupted: it goes on once the dialog is answered.
        self.parked: asyncio.Future[Any] | None = None
        # A call that leaves the page: only the page's own "leave this page?" is shown.
        self.leaving = False
        # Set when the page being left keeps opening dialogs: it will not unload.
        self.stuck = asyncio.Event()
        # A page of its own being opened (`replace_page`): not a popup.
        self.opening_own = False
        # The default bound until a tool call sets this gateway's (`acting.session_of`).
        self.download_max_bytes = BrowserToolsConfig().download_max_bytes
        # Password-field values the page held, seen by snapshots: kept out of the trace.
        self.held_secrets: set[str] = set()
        # Secrets typed into fields that show them (secret: true on a plain text box): a
        # trace's screenshots would show them, so a trace of such a task keeps none.
        self.visible_secrets = False
        self.signals = Signals()
        # Playwright resolves a ref against the page's latest snapshot only: after one of
        # part of the page, a ref of the whole page's would not resolve until the next.
        self.partial_map = False
        # Where each frame was headed: a refused one shows as such in snapshots.
        self.frame_targets = FrameTargets()
        # The windows the pages opened, before they are handed over (`windows.py`).
        self.windows = Windows()
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self.lost: str | None = None  # why the browser under this session is gone
        self.closed = False
        self.document = 0  # bumped on each new main-frame document: refs of older ones are stale
        # Which of its pages a snapshot need not wait for (`parsed.py`).
        self.parsed = ParsedPages()
        self.latest: Snapshot | None = None  # the latest full snapshot
        self.refs = Refs()  # the refs of the current document an agent may use
        # Main-frame navigation requests, and those not over yet (an action's aftermath).
        self.main_navigations = Navigations()
        self.blocked_total = 0
        self.background_refused = 0  # Chromium's own calls home, refused
        # Values the caller typed as secrets: no snapshot of this context shows them.
        self.typed_secrets: set[str] = set()
        # A signed-in task's cookie and local-storage values: shown and kept nowhere.
        self.state_secrets: frozenset[str] = frozenset()
        self.lock = asyncio.Lock()
        self.snapshot_seq = 0  # the number of the latest snapshot
        # What the guard stopped since the last call (`violations.py`).
        self.pending: list[Violation] = []
        self.background: set[asyncio.Future[Any]] = set()
        self.restoring: asyncio.Task[None] | None = None
        self.document_url = BLANK
        self.loss_reported = False
        # Called once when the task's first call is over (the pool's start admission).
        self.on_started: Callable[[], None] | None = None

    @property
    def origins(self) -> frozenset[str]:
        return self.identity.sandbox.origins if self.identity is not None else frozenset()

    @property
    def url(self) -> str:
        try:
            return self.page.url
        except PlaywrightError:
            return BLANK

    # -- what runs besides the calls, and what it found ---------------------------------

    def spawn(self, coro: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(coro)
        self.background.add(future)
        future.add_done_callback(self.background.discard)
        future.add_done_callback(log_failure)

    def violate(self, kind: str, target: str, *, denies: bool) -> None:
        violation = Violation(kind=kind, target=target, denies=denies, at=time.time())
        self.pending.append(violation)
        self.blocked_total += 1
        if self.identity is not None:
            self.sink.repeated(
                self.identity, "origin_blocked", {**violation.public(), "page": self.url[:512]}
            )

    def note(self, kind: str, item: dict[str, Any]) -> None:
        """Something the next call's result says besides its own answer."""
        self._notes.setdefault(kind, []).append(item)

    def report(self, result: Any) -> None:
        notes, self._notes = self._notes, {}
        if isinstance(result, dict):
            for kind, items in notes.items():
                result[kind] = items[:20]

    # -- pages ------------------------------------------------------------------------------

    def new_page_id(self) -> str:
        self._page_seq += 1
        return f"p{self._page_seq}"

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
        self.document_url = _url(page).split("#", 1)[0]
        self.main_navigations.forget()
        self.latest = None

    def take_dialog(self) -> PendingDialog | None:
        pending, self.dialog = self.dialog, None
        return pending

    # -- whether a call can reach the page ------------------------------------------------

    def lose(self, why: str) -> None:
        """The browser under this session is gone (its first reason is kept)."""
        if self.lost is None:
            self.lost = why

    def gone(self) -> ToolFailure:
        self.loss_reported = True
        return browser_unavailable(f"the task's browser is gone ({self.lost}); retry")

    def app_unavailable(self) -> ToolFailure | None:
        if self.app_link is None or self.identity is None:
            return None
        return self.app_link.unavailable(self.identity)

    def release_start(self) -> None:
        release, self.on_started = self.on_started, None
        if release is not None:
            release()


def _url(page: Page) -> str:
    try:
        return page.url
    except PlaywrightError:
        return BLANK


def log_failure(future: asyncio.Future[Any]) -> None:
    """A background task's failure, logged (a page or browser gone is no failure of it)."""
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None and not isinstance(exc, PlaywrightError):
        log.warning("a browser guard task failed: %r", exc)
