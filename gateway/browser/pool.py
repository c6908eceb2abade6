"""The browser pool: one fresh, never-shared context per task, bounded, reaped, replaced.

A task's context is opened on its first browser call (from the warm stock of never-used
contexts when there is one) and closed when the task ends or expires, or after it has been
idle for `browser_idle_s`. Live contexts are bounded by `max_contexts`: past the bound a
call is `unavailable`/`browser_unavailable` and retryable at once, it never waits. When a
Chromium process dies, its tasks' next call says so (`browser_unavailable`, retryable) and
the call after gets a fresh context on the relaunched process; other processes' tasks go on.
Each process has its own lanes of admission (`lanes.py`), kept across relaunches; the warm
stock of never-used contexts is `warm.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ports import Placement
from gateway.core.results import ErrorCode, ToolStatus
from gateway.core.storage_state import StorageState
from gateway.parts import BrowserPoolConfig

from .admission import RUN_MARGIN_S, PageAdmission, task_starts
from .app_link import AppLink
from .errors import browser_unavailable
from .lanes import ProcessLanes
from .processes import BrowserProcess, BrowserProcesses
from .session import BrowserSession, EvidenceSink
from .session_state import SessionOptions
from .warm import WarmStock

log = logging.getLogger(__name__)

# Within the tools' own deadline (60 s); opening many contexts at once on a small machine
# can take tens of seconds, and queueing them behind a gate was measured slower still.
OPEN_TIMEOUT_S = 45.0
# Tasks starting at once per Chromium process, from opening the context to the end of the
# task's first call (which spawns the renderer and loads the first page). Measured with
# raw Playwright on 2 cores, 32 tasks at once: p50 25.7 s ungated, 12.0 s four at a time.
STARTS_PER_PROCESS = 4
START_HOLD_MAX_S = 30.0
ENDED_MEMORY_S = 6 * 3600.0


class BrowserPool:
    def __init__(
        self,
        config: BrowserPoolConfig,
        processes: BrowserProcesses,
        sink: EvidenceSink,
        *,
        owns_processes: bool = True,
        metrics: CollectorRegistry | None = None,
        shed: Counter | None = None,
        app_link: Callable[[], AppLink | None] = lambda: None,
        storage_state: Callable[[str], StorageState | None] = lambda _task_id: None,
        placement: Placement | None = None,
    ) -> None:
        """`shed`: the counter of calls turned away as overloaded (for this resource);
        `app_link`: how tasks reach apps the gateway provisioned, looked up when a task's
        context is opened; `storage_state`: a signed-in task's cookies and local storage;
        `placement`, on a node of a cluster: where the task's browser was before this node
        took it."""
        self.config = config
        self._storage_state = storage_state
        self._app_link = app_link
        self.processes = processes
        self.sink = sink
        self.max_contexts = config.max_contexts
        self._owns = owns_processes
        self._sessions: dict[str, BrowserSession] = {}
        self._opening: dict[str, asyncio.Task[BrowserSession]] = {}
        self.warm = WarmStock(
            min(config.warm_contexts, config.max_contexts),
            self._open_fresh,
            room=lambda: (
                len(self._sessions) + len(self._opening) + len(self.warm) < self.max_contexts
            ),
            quiet_for=self.quiet_for,
            close_later=self._close_later,
        )
        self._ended: dict[str, float] = {}
        self.placement = placement
        self._closers: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None
        self._closing = False
        # `count` is every slot, local Chromium and remote servers alike: each gets its share
        # of task starts and an admission of its own.
        self.starts = task_starts(
            STARTS_PER_PROCESS * processes.count, shed.inc if shed is not None else None
        )
        self.refused = 0
        lanes = ProcessLanes(config, processes.count, shed)
        self.admissions, self.read_admissions = lanes.actions, lanes.reads
        self._denials: Counter | None = None
        if metrics is not None:
            gauge = Gauge(
                "gateway_browser_contexts", "Live task browser contexts", registry=metrics
            )
            gauge.set_function(lambda: float(len(self._sessions)))
            warm = Gauge(
                "gateway_browser_warm_contexts",
                "Never-used browser contexts ready for the next task",
                registry=metrics,
            )
            warm.set_function(lambda: float(len(self.warm)))
            self._denials = Counter(
                "gateway_browser_busy",
                "Browser calls refused because every context was in use",
                registry=metrics,
            )
            lanes.measure(metrics)

    # -- life -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._owns and self.config.launch_at_start:
            try:
                await self.processes.start()
            except ToolFailure as exc:
                # The gateway serves its other doors and tools regardless; browser calls end
                # `browser_unavailable` (retryable) and each tries to start a browser again.
                log.error("no task browser for now: %s", exc.message)
        self._unsubscribe = self.processes.on_death(self._process_died)
        self._reaper = asyncio.ensure_future(self._reap_forever())
        self.warm.refill()

    async def close(self) -> None:
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        warm = self.warm.close()
        for task in self._opening.values():
            task.cancel()
        sessions = [*self._sessions.values(), *warm]
        self._sessions.clear()
        await asyncio.gather(*(s.close("the gateway is stopping") for s in sessions))
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._owns:
            await self.processes.close()

    # -- counts and probes ----------------------------------------------------------------

    def live_count(self) -> int:
        """Contexts held by tasks (the warm stock is not counted)."""
        return len(self._sessions)

    def task_ids(self) -> set[str]:
        """Tasks that hold a context, or are having one opened."""
        return {*self._sessions, *self._opening}

    def warm_count(self) -> int:
        return len(self.warm)

    async def stocked(self) -> int:
        """Wait for the warm stock's refill in progress; returns how many contexts it holds."""
        return await self.warm.stocked()

    def session(self, task_id: str) -> BrowserSession | None:
        return self._sessions.get(task_id)

    def probe(self, task_id: str) -> dict[str, Any]:
        """The task's browser state, for `GET /v1/tasks/{id}`."""
        session = self._sessions.get(task_id)
        if session is None:
            return {"state": "closed" if task_id in self._ended else "none"}
        return {
            "state": "lost" if session.lost else "live",
            "url": session.url[:2048],
            "opened_at": datetime.fromtimestamp(session.created_at, UTC).isoformat(),
            "idle_s": round(time.monotonic() - session.last_used, 3),
            "blocked": session.blocked_total,
            "process": session.process.index,
        }

    # -- a task's session -----------------------------------------------------------------

    async def session_for(
        self, identity: TaskIdentity, time_left: float = math.inf
    ) -> BrowserSession:
        """The task's own context, opened on its first call; never another task's.

        `time_left`: seconds until that call's deadline. A start that would not get its turn
        in time (with the time a start takes) is refused at once, `overloaded`."""
        task_id = identity.task_id
        session = self._sessions.get(task_id)
        if session is not None:
            if session.lost is None:
                return session
            # The process under it died: say so once, then start afresh.
            self._sessions.pop(task_id, None)
            self._close_later(session, "its browser process ended")
            if not session.loss_reported:
                raise browser_unavailable(
                    f"the task's browser was lost ({session.lost}); the next call gets a new one"
                )
        if task_id in self._ended or identity.expired():
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
        moved = self.placement.browser_moved(task_id) if self.placement is not None else None
        if moved is not None:
            raise browser_unavailable(moved)
        opening = self._opening.get(task_id)
        if opening is None:
            if self._closing:
                raise browser_unavailable("the browser pool is shutting down")
            if len(self._sessions) + len(self._opening) >= self.max_contexts:
                self.refused += 1
                if self._denials is not None:
                    self._denials.inc()
                raise browser_unavailable(
                    f"all {self.max_contexts} browser contexts are in use; retry later"
                )
            opening = asyncio.ensure_future(self._open_for(identity, time_left))
            self._opening[task_id] = opening
            opening.add_done_callback(lambda t: self._opened(task_id, t))
        # The call waits for its context only as long as it would still have time for its
        # action after it: past that it ends now, nothing done, and the context goes on
        # opening for the task's next call (a call that timed out in its start told the
        # caller nothing, and spent its whole deadline).
        within = time_left - self._first_action_s()
        try:
            return await asyncio.wait_for(
                asyncio.shield(opening), max(0.0, within) if math.isfinite(within) else None
            )
        except TimeoutError:
            # Turned away as a start the gate refused is: counted, with its retry hint.
            raise self.starts.refuse(self.starts.slowest_s()) from None

    def _first_action_s(self) -> float:
        """What a task's first action is expected to take once its context is open: the
        slowest recent action of the pool's processes, and what a call does besides."""
        return max(a.slowest_s() for a in self.admissions) + RUN_MARGIN_S

    def _opened(self, task_id: str, opening: asyncio.Future[BrowserSession]) -> None:
        self._opening.pop(task_id, None)
        # A start whose caller stopped waiting has nobody to tell of its failure: the
        # task's next call opens another.
        if not opening.cancelled():
            opening.exception()

    async def _open_for(self, identity: TaskIdentity, time_left: float) -> BrowserSession:
        # Admission for starts: the slot is released when the task's first call is over,
        # and how long it was held is what the next starts are weighed at.
        await self.starts.acquire(time_left)
        admitted = time.monotonic()
        state = self._storage_state(identity.task_id)
        try:
            # A warm context holds no task's state and records no video: a signed-in task
            # or one that asked for a video gets a context of its own.
            own = state is not None or identity.record_video
            session = None if own else self.warm.take()
            if session is None:
                session = await self._open_fresh(state, record_video=identity.record_video)
        except BaseException:
            self.starts.release(None)
            raise
        session.on_started = lambda: self.starts.release(time.monotonic() - admitted)
        # A task that never makes its first call (its caller gave up) frees its slot anyway.
        asyncio.get_running_loop().call_later(START_HOLD_MAX_S, session.release_start)
        try:
            link = self._app_link()
            if link is not None:
                await link.attach(identity)
            await session.assign(identity, link)
        except BaseException:
            await session.close("it could not be handed to its task")
            raise
        if identity.task_id in self._ended or self._closing:
            # The task ended while its context was being opened.
            await session.close("the task ended")
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
        self._sessions[identity.task_id] = session
        self.warm.handed_off()
        if self.placement is not None:
            await self.placement.browser_opened(identity.task_id)
        return session

    async def _open_fresh(
        self, state: StorageState | None = None, *, record_video: bool = False
    ) -> BrowserSession:
        return await self._open_on(await self.processes.pick(), state, record_video=record_video)

    async def _open_on(
        self,
        process: BrowserProcess,
        state: StorageState | None = None,
        *,
        record_video: bool = False,
    ) -> BrowserSession:
        process.context_opened()
        try:
            session = await asyncio.wait_for(
                BrowserSession.open(
                    process,
                    self.sink,
                    SessionOptions(
                        snapshot_max_chars=self.config.snapshot_max_chars,
                        trace=self.config.trace,
                        keep_screenshots=self.config.screenshots,
                        admission=PageAdmission(self.admissions[process.index]),
                        reads=PageAdmission(self.read_admissions[process.index]),
                    ),
                    storage_state=state,
                    record_video=record_video,
                ),
                OPEN_TIMEOUT_S,
            )
        except TimeoutError:
            process.context_closed()
            raise browser_unavailable("the browser did not open a context in time") from None
        except ToolFailure:
            process.context_closed()
            raise
        except Exception as exc:
            process.context_closed()
            raise browser_unavailable(f"the browser could not open a context: {exc}") from exc
        return session

    async def end_task(self, task_id: str, reason: str) -> None:
        """Close the task's context (task ended or expired); idempotent."""
        self._ended[task_id] = time.monotonic()
        opening = self._opening.get(task_id)
        if opening is not None:
            with contextlib.suppress(BaseException):
                await opening
        session = self._sessions.pop(task_id, None)
        if session is not None:
            await self._close(session, reason)

    async def _close(self, session: BrowserSession, reason: str) -> None:
        try:
            await session.close(reason)
        finally:
            session.process.context_closed()

    def _close_later(self, session: BrowserSession, reason: str) -> None:
        task = asyncio.ensure_future(self._close(session, reason))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    # -- how busy the browsers are --------------------------------------------------------

    def quiet_for(self) -> float:
        """Seconds since a task's browser last ran a call (0 while one runs or opens)."""
        if self._opening:
            return 0.0
        last = None
        for session in self._sessions.values():
            if session.lock.locked():
                return 0.0
            last = session.last_used if last is None else max(last, session.last_used)
        return float("inf") if last is None else time.monotonic() - last

    # -- faults and reaping -----------------------------------------------------------------

    def _process_died(self, process: BrowserProcess) -> None:
        for session in self._sessions.values():
            if session.process is process:
                session.lose("the browser process ended")
        self.warm.process_died(process)

    async def _reap_forever(self) -> None:
        period = max(0.05, min(5.0, self.config.idle_s / 4))
        while True:
            await asyncio.sleep(period)
            try:
                await self.reap()
            except Exception:
                log.exception("reaping idle browser contexts failed")

    async def reap(self) -> None:
        """Close contexts idle past the limit or of expired tasks."""
        now = time.monotonic()
        for task_id, session in list(self._sessions.items()):
            expired = session.identity is not None and session.identity.expired()
            idle = now - session.last_used > self.config.idle_s
            if (expired or idle) and not session.lock.locked():
                self._sessions.pop(task_id, None)
                await self._close(session, "the task expired" if expired else "idle")
        for task_id, at in list(self._ended.items()):
            if now - at > ENDED_MEMORY_S:
                del self._ended[task_id]
