"""TabHub: where a task's tab is, and the one awaitable a tool handler uses to reach it.

    outcome = await ctx.service(TabHub).send(ctx.identity, ReadView(), timeout_s=10)
    view = outcome.unwrap()          # or inspect outcome.status / outcome.error

The hub owns one `TabChannel` core per task and carries out the effects the cores return:
frames go to a connection's outbox (written in order, by its writer task or directly),
settled requests wake their awaiting handler, rejected frames are counted and recorded as
evidence, and tool calls from the page run through the pipeline under the tab's identity.
When the awaiting handler is cancelled (its MCP client cancelled the call, or the
pipeline's deadline hit), the tab gets a `cancel` frame.

A tab answers a few UI actions at a time: each task's tab has an `Admission`
(`gateway/core/admission.py`) of `TabConfig.actions_at_once` places and a short queue. An action
that could not be answered before its deadline (by the running average of the tab's recent
round trips), or that finds the queue full, ends at once `unavailable`/`overloaded`,
retryable, with `details.retry_after_s`, and nothing is sent to the tab.

Every "which process holds this task's tab" question goes through this class; several
gateway processes would route through a shared broker behind the same methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ValidationError

from gateway.core.admission import Admission
from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.ports import ApprovalDesk, CallRunner, Catalog, EventRecorder
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.core.tasks.log import Level
from gateway.tabs import frames
from gateway.tabs.actions import UIAction, build_action
from gateway.tabs.channel import (
    Answer,
    CancelCall,
    ChannelLimits,
    Close,
    Effect,
    Rejected,
    Send,
    Settle,
    StartCall,
    TabChannel,
)
from gateway.tabs.outcome import TabOutcome, failure
from gateway.tabs.views import Views

log = logging.getLogger(__name__)


ENDED_KEEP_S = 300.0
# The round trip assumed for a tab until one is measured (the shim answers in about a
# millisecond; a page's own handler may take longer). It only matters while every place
# is taken before any action came back.
FIRST_ROUND_TRIP_S = 0.1
# What an action needs besides its round trip (the reply's checks, the calling tool's
# evidence and answer): an action that cannot keep this much before its deadline waits no
# longer for its turn.
REPLY_MARGIN_S = 0.05


@dataclass(frozen=True)
class TabConfig:
    """Knobs of the tab channel; provide one before install to change them:
    `gw.services.provide(TabConfig, TabConfig(hello_timeout_s=2))`."""

    hello_timeout_s: float = 5.0
    request_timeout_s: float = 25.0
    # A tab that takes longer than this to accept one frame is not reading: it is dropped
    # rather than buffered for (its socket's buffers are full; ours must not grow).
    write_timeout_s: float = 10.0
    tick_s: float = 1.0
    limits: ChannelLimits = field(default_factory=ChannelLimits)
    # UI actions a tab is sent at once, and how many more may wait for one of those places;
    # past that, or when an action could not be answered before its deadline, it ends at
    # once `overloaded` (a page runs its handlers on one thread: more at once only queue
    # inside the page, out of sight of the caller's deadline).
    actions_at_once: int = 4
    actions_waiting: int = 4


class _Deadlines:
    """When each pending request expires, behind one timer armed for the earliest.

    A timer of its own per request cost more than the rest of the request's bookkeeping;
    here a request is one heap entry, and the timer moves only for a deadline earlier than
    every other. A settled request's entry stays until its time comes (it expires nothing
    then), or until a compaction keeps only the live ones.
    """

    COMPACT_AT = 1024

    def __init__(self, expire: Callable[[str, str], None]) -> None:
        self._expire = expire
        self._heap: list[tuple[float, str, str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def add(
        self, loop: asyncio.AbstractEventLoop, when: float, task_id: str, request_id: str
    ) -> None:
        heapq.heappush(self._heap, (when, task_id, request_id))
        if when < self._armed_at:
            self._arm(loop, when)

    def compact(self, live: Mapping[str, Any]) -> None:
        """Drop the entries of settled requests once they outnumber the live ones."""
        if len(self._heap) >= self.COMPACT_AT and len(self._heap) > 4 * len(live):
            self._heap = [entry for entry in self._heap if entry[2] in live]
            heapq.heapify(self._heap)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._armed_at = math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = loop.call_at(when, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._armed_at = math.inf
        now = loop.time()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _when, task_id, request_id = heapq.heappop(heap)
            self._expire(task_id, request_id)
        if heap:
            self._arm(loop, heap[0][0])


@dataclass(frozen=True)
class CloseCommand:
    code: int
    reason: str


Outgoing = dict[str, Any] | CloseCommand


Writer = Callable[[Outgoing], Awaitable[bool]]


@dataclass
class TabLink:
    """One authenticated tab connection, as the hub sees it.

    Frames wait in `outbox` and are written in order by one `flush` at a time, either the
    connection's writer task's or `TabHub.send`'s own (which saves a task switch on the
    hot path). `write` is set by the endpoint and returns False once the socket is done.
    The writer task gives each frame `TabConfig.write_timeout_s` to be taken; `TabHub.send`
    waits no longer than its request's own expiry (see `TabHub._expire`).
    """

    conn_id: str
    identity: TaskIdentity
    tab_id: str
    token_expires_at: float
    outbox: deque[Outgoing] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    writing: bool = False  # a flush is under way
    write: Writer | None = None
    done: bool = False
    calls: dict[str, asyncio.Event] = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = None

    def push(self, item: Outgoing) -> None:
        self.outbox.append(item)
        self.wake.set()

    async def flush(self, write_timeout_s: float | None = None) -> None:
        """Write what waits in the outbox, in order. A flush that finds another under way
        leaves the frames to it (it writes until the outbox is empty); one that stops
        early (cancelled while the socket made it wait) is followed up by the writer task
        (whoever stopped it sets `wake`)."""
        if self.writing:
            return
        self.writing = True
        try:
            while self.outbox and not self.done and self.write is not None:
                # Taken off only once written: a write cancelled while it waits for the
                # socket leaves its frame first in line for the writer task.
                if write_timeout_s is None:
                    written = await self.write(self.outbox[0])
                else:
                    try:
                        async with asyncio.timeout(write_timeout_s):
                            written = await self.write(self.outbox[0])
                    except TimeoutError:
                        log.info("a tab stopped reading; dropping its connection")
                        written = False
                self.outbox.popleft()
                if not written:
                    self.done = True
                    self.outbox.clear()
        finally:
            self.writing = False


class TabHub:
    def __init__(
        self,
        *,
        calls: CallRunner,
        catalog: Catalog,
        events: EventRecorder,
        metrics: CollectorRegistry,
        views: Views,
        config: TabConfig | None = None,
        log: Callable[[str, Level, str, dict[str, Any]], None] | None = None,
        desk: ApprovalDesk | None = None,
        on_shed: Callable[[], None] | None = None,
    ) -> None:
        """`on_shed`: called for each UI action turned away as overloaded (the gateway's
        `gateway_calls_shed{resource="tab"}`)."""
        self.calls = calls
        self._on_shed = on_shed
        self.desk = desk
        self._log = log
        self.catalog = catalog
        self.events = events
        self.views = views
        self.config = config or TabConfig()
        self._channels: dict[str, TabChannel] = {}
        self._links: dict[str, TabLink] = {}
        self._waiting: dict[str, asyncio.Future[TabOutcome]] = {}
        self._admissions: dict[str, Admission] = {}
        self._deadlines = _Deadlines(self._expire)
        # Request ids: unique to this hub (a counter) and across gateways (a random part),
        # without a call to the system's random source per request.
        self._request_ids = map(f"req_{secrets.token_hex(6)}_{{:x}}".format, itertools.count(1))
        # Requests whose caller is writing them to the socket itself, and those of them
        # whose expiry ended that write (see `_expire`).
        self._writing: dict[str, asyncio.Task[Any]] = {}
        self._cut: set[str] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._ended_at: dict[str, float] = {}
        # Labelled children, looked up once: `labels()` costs more than the count itself.
        self._request_counters: dict[tuple[str, str], Any] = {}
        registry = metrics
        self.rejected = Counter(
            "gateway_tab_frames_rejected",
            "Frames from dashboard tabs the channel refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.refused = Counter(
            "gateway_tab_handshakes_refused",
            "Tab channel handshakes refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "gateway_tab_requests",
            "UI action requests sent to tabs, by terminal status",
            ["action", "status"],
            registry=registry,
        )
        self.connections = Gauge(
            "gateway_tab_connections", "Dashboard tabs connected now", registry=registry
        )

    # -- the handler-facing API -------------------------------------------------------

    def action(self, kind: str, args: BaseModel | Mapping[str, Any]) -> UIAction:
        """Build and validate a UI action (raises ValueError if it is not allowed)."""
        return build_action(kind, args, self.views)

    async def send(
        self, identity: TaskIdentity, action: UIAction, *, timeout_s: float | None = None
    ) -> TabOutcome:
        """Send a UI action to the task's tab and wait for its terminal outcome.

        Never raises for an outcome (no tab, overloaded, timeout, stale target, the page's
        own error: all come back as a `TabOutcome`); a cancelled caller cancels the request
        on the tab. `timeout_s` is the action's deadline: it waits for its turn at the tab
        only while it can still expect an answer before it.
        """
        timeout = self.config.request_timeout_s if timeout_s is None else timeout_s
        request_id = next(self._request_ids)
        task_id = identity.task_id
        channel = self._channel(task_id)
        admission: Admission | None = None
        waited = 0.0
        if channel.conn_id is not None and channel.ended is None:
            # Without a tab (or after the task's end) the channel answers at once: only an
            # action that would reach a tab takes a place.
            admission = self._admission(task_id)
            if not admission.try_acquire():
                try:
                    waited = await admission.acquire(timeout)
                except ToolFailure as refused:
                    return self._count(action, _shed(request_id, refused))
                # The tab may have left while the action waited, and the channel with it.
                channel = self._channel(task_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TabOutcome] = loop.create_future()
        self._waiting[request_id] = future
        remaining = timeout - waited
        self._deadlines.compact(self._waiting)
        self._deadlines.add(loop, loop.time() + remaining, task_id, request_id)
        started = time.monotonic()
        sent = False
        try:
            link = self._stage(channel, channel.request(request_id, action, time.time(), remaining))
            if link is not None:
                sent = True
                if not link.writing:
                    # Written now rather than on the writer task's next turn (a task switch
                    # saved on the hot path). A frame is handed to the transport whole
                    # before any await, so a cancellation cannot cut one in half.
                    task = asyncio.current_task()
                    assert task is not None
                    self._writing[request_id] = task
                    try:
                        await link.flush()
                    except asyncio.CancelledError:
                        # The request's expiry ended a write the tab did not take in time
                        # (it has its outcome); any other cancellation is the caller's.
                        if request_id not in self._cut or task.uncancel() > 0:
                            raise
                    finally:
                        del self._writing[request_id]
                        self._cut.discard(request_id)
                        if link.outbox:
                            # The tab is not reading: the writer task sends what is
                            # left, and drops a tab that does not take it in time.
                            link.wake.set()
                # else another flush is under way, and writes it with the rest.
            outcome = await future
        except asyncio.CancelledError:
            self._apply(channel, channel.cancel(request_id, "cancelled"))
            raise
        finally:
            del self._waiting[request_id]
            if admission is not None:
                # Only a request the tab was sent says how long the tab takes.
                admission.release(time.monotonic() - started if sent else None)
            self._forget_if_idle(channel)
        if waited:
            outcome = replace(outcome, waited_s=waited)
        return self._count(action, outcome)

    def _stage(self, channel: TabChannel, effects: list[Effect]) -> TabLink | None:
        """Carry out a request's effects, except that its frame is only put in the outbox
        (the caller writes it); returns the link it waits in, if it was sent to a tab."""
        link: TabLink | None = None
        for effect in effects:
            if isinstance(effect, Send) and (link := self._links.get(effect.conn)) is not None:
                link.outbox.append(effect.frame)
            else:
                self._apply(channel, [effect])
        return link

    def _count(self, action: UIAction, outcome: TabOutcome) -> TabOutcome:
        key = (action.type, outcome.status.value)
        counter = self._request_counters.get(key)
        if counter is None:
            counter = self._request_counters[key] = self.requests.labels(*key)
        counter.inc()
        return outcome

    def approval_changed(self, task_id: str, shown: dict[str, Any]) -> None:
        """An approval of the task was made (show it in the tab) or closed (take it away)."""
        channel = self._channel(task_id)
        if shown["status"] == "pending":
            self._apply(channel, channel.show_approval(shown))
        else:
            self._apply(channel, channel.close_approval(shown["id"], shown["status"]))
            self._forget_if_idle(channel)

    def connected_task_ids(self) -> set[str]:
        """Tasks with a tab connected, or a request still pending."""
        return {
            task_id
            for task_id, channel in self._channels.items()
            if channel.conn_id is not None or channel.pending_ids()
        }

    def describe(self, task_id: str) -> dict[str, Any]:
        channel = self._channels.get(task_id)
        if channel is None:
            return {"connected": False, "pending_requests": 0}
        described = channel.describe()
        admission = self._admissions.get(task_id)
        # UI actions waiting for their turn at the tab (not sent to it yet).
        described["waiting_requests"] = admission.queued if admission is not None else 0
        return described

    # -- the endpoint-facing API ------------------------------------------------------

    def attach(
        self,
        identity: TaskIdentity,
        hello: frames.Hello,
        token_expires_at: float,
        write: Writer | None = None,
    ) -> TabLink:
        """A tab said a valid hello: it becomes the task's tab (superseding any other)."""
        conn_id = new_id("conn")
        link = TabLink(conn_id, identity, hello.tab_id, token_expires_at, write=write)
        self._links[conn_id] = link
        self.connections.inc()
        channel = self._channel(identity.task_id)
        effects = channel.connect(conn_id, hello.tab_id, hello.revision, hello.view, time.time())
        if channel.conn_id == conn_id:
            link.push(self._welcome(link, hello.revision))
            self._tell(identity.task_id, "connected", hello.tab_id)
            delay = max(0.0, token_expires_at - time.time())
            link.expiry = asyncio.get_running_loop().call_later(
                delay, self._token_expired, identity.task_id, conn_id
            )
        self._apply(channel, effects)
        return link

    def receive(self, link: TabLink, text: str | bytes) -> None:
        channel = self._channel(link.identity.task_id)
        self._apply(channel, channel.receive(link.conn_id, text, time.time()))

    def detach(self, link: TabLink) -> None:
        if self._links.pop(link.conn_id, None) is None:
            return
        self.connections.dec()
        self._tell(link.identity.task_id, "disconnected", link.tab_id)
        if link.expiry is not None:
            link.expiry.cancel()
        for event in link.calls.values():
            event.set()
        channel = self._channels.get(link.identity.task_id)
        if channel is not None:
            self._apply(channel, channel.disconnect(link.conn_id))
            self._forget_if_idle(channel)

    def _tell(self, task_id: str, event: str, tab_id: str) -> None:
        if self._log is not None:
            self._log(task_id, "info", "tab", {"event": event, "tab_id": tab_id})

    def refuse(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    # -- lifecycle --------------------------------------------------------------------

    async def task_ended(self, task_id: str, _reason: str) -> None:
        channel = self._channel(task_id)
        self._apply(channel, channel.end("task_ended"))
        self._ended_at[task_id] = time.monotonic()

    async def task_moved(self, task_id: str) -> None:
        """Another gateway node holds the task now: close its tab's connection here, with
        a code that is not final, so the tab connects again and reaches that node."""
        for link in list(self._links.values()):
            if link.identity.task_id == task_id:
                link.push(CloseCommand(frames.CLOSE_MOVED, "the task moved to another node"))

    def catalog_changed(self) -> None:
        """The registry changed: every tab gets a fresh `welcome` with its catalog."""
        for link in list(self._links.values()):
            channel = self._channels.get(link.identity.task_id)
            if channel is None or channel.conn_id != link.conn_id:
                continue
            link.push(self._welcome(link, channel.revision() or 0))

    async def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        self._deadlines.stop()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for link in list(self._links.values()):
            link.push(CloseCommand(1001, "the gateway is stopping"))
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- internals --------------------------------------------------------------------

    def _channel(self, task_id: str) -> TabChannel:
        channel = self._channels.get(task_id)
        if channel is None:
            channel = self._channels[task_id] = TabChannel(task_id, self.config.limits)
        return channel

    def _admission(self, task_id: str) -> Admission:
        admission = self._admissions.get(task_id)
        if admission is None:
            config = self.config
            admission = self._admissions[task_id] = Admission(
                config.actions_at_once,
                max_waiting=config.actions_waiting,
                first_guess_s=FIRST_ROUND_TRIP_S,
                run_margin_s=REPLY_MARGIN_S,
                what="the dashboard tab",
                unit="UI actions",
                on_shed=self._on_shed,
            )
        return admission

    def _forget_if_idle(self, channel: TabChannel) -> None:
        # An idle live channel costs nothing to rebuild. An ended one is kept for a while
        # (`ENDED_KEEP_S`) so a hello racing the end still gets 4002; then it is pruned.
        # The tab's admission (its measured round trips) lives as long as its channel, or
        # until the last action that holds or waits for a place is over.
        task_id = channel.task_id
        if (
            channel.conn_id is None
            and channel.ended is None
            and not channel.has_pending()
            and not channel.approvals_shown()
            and self._channels.get(task_id) is channel
        ):
            del self._channels[task_id]
        if task_id not in self._channels:
            admission = self._admissions.get(task_id)
            if admission is not None and admission.idle:
                del self._admissions[task_id]

    def _prune_ended(self) -> None:
        horizon = time.monotonic() - ENDED_KEEP_S
        for task_id, at in list(self._ended_at.items()):
            if at < horizon:
                del self._ended_at[task_id]
                channel = self._channels.get(task_id)
                if channel is not None and channel.conn_id is None and not channel.pending_ids():
                    del self._channels[task_id]
                    self._forget_if_idle(channel)

    def _welcome(self, link: TabLink, revision: int) -> dict[str, Any]:
        """The `welcome` frame for a connection: its identity's catalog, the views."""
        return frames.welcome(
            link.identity.task_id,
            self.catalog.catalog(link.identity),
            self.views.describe(),
            self.config.limits.heartbeat_s,
            tab_id=link.tab_id,
            revision=revision,
            expires_at=link.token_expires_at,
        )

    def _expire(self, task_id: str, request_id: str) -> None:
        channel = self._channels.get(task_id)
        if channel is not None:
            self._apply(channel, channel.expire(request_id))
        writing = self._writing.get(request_id)
        if writing is not None:
            # Its caller still waits for the socket to take the request: the deadline ends
            # that wait too. The frame stays first in line for the writer task.
            self._cut.add(request_id)
            writing.cancel()

    def _token_expired(self, task_id: str, conn_id: str) -> None:
        channel = self._channels.get(task_id)
        if channel is not None:
            self._apply(channel, channel.token_expired(conn_id))

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            now = time.time()
            self._prune_ended()
            for channel in list(self._channels.values()):
                try:
                    self._apply(channel, channel.tick(now))
                except Exception:
                    log.exception("tab channel tick failed for %s", channel.task_id)

    def _apply(self, channel: TabChannel, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Settle):
                future = self._waiting.get(effect.outcome.request_id)
                if future is not None and not future.done():
                    future.set_result(effect.outcome)
            elif isinstance(effect, Send):
                link = self._links.get(effect.conn)
                if link is not None:
                    link.push(effect.frame)
            elif isinstance(effect, Close):
                link = self._links.get(effect.conn)
                if link is not None:
                    link.push(CloseCommand(effect.code, effect.reason))
            elif isinstance(effect, Rejected):
                self._rejected(effect)
            elif isinstance(effect, StartCall):
                self._start_call(channel, effect)
            elif isinstance(effect, Answer):
                self._answer(effect)
            elif isinstance(effect, CancelCall):
                link = self._links.get(effect.conn)
                event = link.calls.get(effect.call_id) if link is not None else None
                if event is not None:
                    event.set()

    def _rejected(self, effect: Rejected) -> None:
        self.rejected.labels(effect.reason).inc()
        link = self._links.get(effect.conn)
        if link is None:
            return
        data = {
            "reason": effect.reason,
            "message": effect.message,
            "frame_type": effect.frame_type,
            "connection": effect.conn,
            **effect.details,
        }
        self.events.repeated(link.identity, "tab.frame_rejected", data)

    def _answer(self, effect: Answer) -> None:
        link = self._links.get(effect.conn)
        if link is None or self.desk is None:
            return
        desk = self.desk

        async def answer() -> None:
            try:
                await desk.answer(
                    link.identity,
                    effect.approval_id,
                    decision=effect.decision,
                    scope=effect.scope,
                    channel="tab",
                    nonce=effect.nonce,
                )
            except GatewayError as exc:
                self.rejected.labels("approval_refused").inc()
                await self.events.record(
                    link.identity,
                    "tab.approval_refused",
                    {
                        "approval_id": effect.approval_id,
                        "code": exc.code,
                        "message": exc.message,
                        "connection": effect.conn,
                    },
                )
                link.push(frames.error(str(exc.code), exc.message, id=effect.approval_id))

        self._spawn(answer())

    def _start_call(self, channel: TabChannel, effect: StartCall) -> None:
        link = self._links.get(effect.conn)
        if link is None:
            return
        cancel = asyncio.Event()
        link.calls[effect.call_id] = cancel
        door = Door.WEBMCP if effect.webmcp else Door.TAB

        async def run() -> None:
            try:
                result = await self.calls.call(
                    link.identity, effect.tool, effect.input, door=door, cancel=cancel
                )
                public = result.public()
            except Exception:  # the pipeline never raises for a call; this is a bug guard
                log.exception("a tab tool call crashed")
                public = failure(
                    effect.call_id, ToolStatus.FAILED, ErrorCode.HANDLER_ERROR, "internal error"
                ).public()
            finally:
                link.calls.pop(effect.call_id, None)
            self._apply(channel, channel.call_finished(effect.conn, effect.call_id, public))

        self._spawn(run())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _shed(request_id: str, refused: ToolFailure) -> TabOutcome:
    """The outcome of an action the tab's admission turned away: nothing was sent."""
    return failure(
        request_id,
        refused.tool_status,
        refused.code,
        refused.message,
        retryable=refused.retryable,
        details=refused.details,
    )


def parse_hello(raw: Any) -> frames.Hello:
    """The first frame, which must be a hello (raises ValueError otherwise)."""
    try:
        return frames.Hello.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"the first frame must be a hello ({exc.error_count()} errors)") from None
