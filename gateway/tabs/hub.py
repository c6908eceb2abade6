"""TabHub: where a task's tab is, and the one awaitable a tool handler uses to reach it.

    outcome = await ctx.service(TabHub).send(ctx.identity, ReadView(), timeout_s=10)
    view = outcome.unwrap()          # or inspect outcome.status / outcome.error

The hub owns one `TabChannel` core per task and carries out the effects the cores return:
frames go to a connection's outbox (written in order, by its writer task or directly),
settled requests wake their awaiting handler, rejected frames are counted and recorded as
evidence, and tool calls from the page run through the pipeline under the tab's identity.
When the awaiting handler is cancelled (its MCP client cancelled the call, or the
pipeline's deadline hit), the tab gets a `cancel` frame.

Every "which process holds this task's tab" question goes through this class; several
gateway processes would route through a shared broker behind the same methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ValidationError

from gateway.errors import GatewayError
from gateway.identity import TaskIdentity
from gateway.ports import ApprovalDesk, CallRunner, Catalog, EventRecorder
from gateway.results import Door, ErrorCode, ToolStatus
from gateway.store.database import new_id
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
from gateway.task_log import Level

log = logging.getLogger(__name__)


ENDED_KEEP_S = 300.0


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


@dataclass(frozen=True)
class CloseCommand:
    code: int
    reason: str


Outgoing = dict[str, Any] | CloseCommand


Writer = Callable[[Outgoing], Awaitable[bool]]


@dataclass
class TabLink:
    """One authenticated tab connection, as the hub sees it.

    Frames wait in `outbox` and are written in order under `lock`, either by the
    connection's writer task or directly by `TabHub.send` (which saves a task switch on the
    hot path). `write` is set by the endpoint and returns False once the socket is done.
    """

    conn_id: str
    identity: TaskIdentity
    tab_id: str
    token_expires_at: float
    outbox: deque[Outgoing] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    write: Writer | None = None
    done: bool = False
    calls: dict[str, asyncio.Event] = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = None

    def push(self, item: Outgoing) -> None:
        self.outbox.append(item)
        self.wake.set()

    async def flush(self) -> None:
        async with self.lock:
            while self.outbox and not self.done and self.write is not None:
                # Taken off only once written: a write cancelled while it waits for the
                # socket leaves its frame first in line for the writer task.
                written = await self.write(self.outbox[0])
                self.outbox.popleft()
                if not written:
                    self.done = True
                    self.outbox.clear()


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
    ) -> None:
        self.calls = calls
        self.desk = desk
        self._log = log
        self.catalog = catalog
        self.events = events
        self.views = views
        self.config = config or TabConfig()
        self._channels: dict[str, TabChannel] = {}
        self._links: dict[str, TabLink] = {}
        self._waiting: dict[str, asyncio.Future[TabOutcome]] = {}
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

        Never raises for an outcome (no tab, timeout, stale target, the page's own error:
        all come back as a `TabOutcome`); a cancelled caller cancels the request on the tab.
        """
        timeout = self.config.request_timeout_s if timeout_s is None else timeout_s
        request_id = new_id("req")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TabOutcome] = loop.create_future()
        self._waiting[request_id] = future
        channel = self._channel(identity.task_id)
        timer = loop.call_later(timeout, self._expire, identity.task_id, request_id)
        try:
            self._apply(channel, channel.request(request_id, action, time.time(), timeout))
            link = self._links.get(channel.conn_id or "")
            if link is not None:
                # Write the request now rather than on the writer task's next turn. A frame
                # is handed to the transport whole before any await, so a cancellation here
                # cannot cut one in half. A tab that is not reading cannot hold the caller
                # past its own deadline: the writer task sends what is left.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await link.flush()
            outcome = await future
        except asyncio.CancelledError:
            self._apply(channel, channel.cancel(request_id, "cancelled"))
            raise
        finally:
            timer.cancel()
            self._waiting.pop(request_id, None)
            self._forget_if_idle(channel)
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
        return channel.describe()

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

    def _forget_if_idle(self, channel: TabChannel) -> None:
        # An idle live channel costs nothing to rebuild. An ended one is kept for a while
        # (`ENDED_KEEP_S`) so a hello racing the end still gets 4002; then it is pruned.
        if (
            channel.ended is None
            and channel.conn_id is None
            and not channel.pending_ids()
            and not channel.approvals_shown()
        ):
            self._channels.pop(channel.task_id, None)

    def _prune_ended(self) -> None:
        horizon = time.monotonic() - ENDED_KEEP_S
        for task_id, at in list(self._ended_at.items()):
            if at < horizon:
                del self._ended_at[task_id]
                channel = self._channels.get(task_id)
                if channel is not None and channel.conn_id is None and not channel.pending_ids():
                    del self._channels[task_id]

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
            if isinstance(effect, Send):
                link = self._links.get(effect.conn)
                if link is not None:
                    link.push(effect.frame)
            elif isinstance(effect, Close):
                link = self._links.get(effect.conn)
                if link is not None:
                    link.push(CloseCommand(effect.code, effect.reason))
            elif isinstance(effect, Settle):
                future = self._waiting.get(effect.outcome.request_id)
                if future is not None and not future.done():
                    future.set_result(effect.outcome)
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


def parse_hello(raw: Any) -> frames.Hello:
    """The first frame, which must be a hello (raises ValueError otherwise)."""
    try:
        return frames.Hello.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"the first frame must be a hello ({exc.error_count()} errors)") from None
