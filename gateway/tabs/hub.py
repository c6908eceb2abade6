"""TabHub: where a task's tab is, and the one awaitable a tool handler uses to reach it.

    outcome = await ctx.service(TabHub).send(ctx.identity, ReadView(), timeout_s=10)
    view = outcome.unwrap()          # or inspect outcome.status / outcome.error

The hub owns one `TabChannel` core per task and carries out the effects the cores return:
frames go to a connection's outbox (written in order, by its writer task or directly),
settled requests wake their awaiting handler, rejected frames are counted and recorded as
evidence, and tool calls from the page run through the pipeline under the tab's identity.
When the awaiting handler is cancelled (its MCP client cancelled the call, or the
pipeline's deadline hit), the tab gets a `cancel` frame.

A tab answers a few UI actions at a time (`gateway/tabs/admissions.py`): an action that
could not be answered before its deadline, or that finds the queue full, ends at once
`unavailable`/`overloaded` and nothing is sent to the tab.

Every "which process holds this task's tab" question goes through this class; several
gateway processes would route through a shared broker behind the same methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from gateway.core.admission import Admission
from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.ports import ApprovalDesk, CallRunner, Catalog, EventRecorder
from gateway.core.tasks.log import Level
from gateway.tabs import frames
from gateway.tabs.actions import UIAction, build_action
from gateway.tabs.admissions import Admissions, shed
from gateway.tabs.channel import TabChannel
from gateway.tabs.config import TabConfig
from gateway.tabs.deadlines import Deadlines
from gateway.tabs.effects import (
    Answer,
    CancelCall,
    Close,
    Effect,
    Rejected,
    Send,
    Settle,
    StartCall,
)
from gateway.tabs.link import CloseCommand, TabLink, Writer
from gateway.tabs.metrics import TabMetrics
from gateway.tabs.outcome import TabOutcome
from gateway.tabs.page_calls import PageCalls
from gateway.tabs.views import Views

log = logging.getLogger(__name__)


ENDED_KEEP_S = 300.0


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
        self._log = log
        self.catalog = catalog
        self.events = events
        self.views = views
        self.config = config or TabConfig()
        self._channels: dict[str, TabChannel] = {}
        self._links: dict[str, TabLink] = {}
        self._waiting: dict[str, asyncio.Future[TabOutcome]] = {}
        self._admissions = Admissions(self.config, on_shed)
        self._deadlines = Deadlines(self._expire)
        # Request ids: unique to this hub (a counter) and across gateways (a random part),
        # without a call to the system's random source per request.
        self._request_ids = map(f"req_{secrets.token_hex(6)}_{{:x}}".format, itertools.count(1))
        # Requests whose caller is writing them to the socket itself, and those of them
        # whose expiry ended that write (see `_expire`).
        self._writing: dict[str, asyncio.Task[Any]] = {}
        self._cut: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._ended_at: dict[str, float] = {}
        self._metrics = tab_metrics = TabMetrics(metrics)
        self.rejected, self.refused = tab_metrics.rejected, tab_metrics.refused
        self.requests, self.connections = tab_metrics.requests, tab_metrics.connections
        self._page = PageCalls(calls=calls, events=events, desk=desk, rejected=self.rejected)

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
            admission = self._admissions.of(task_id)
            if not admission.try_acquire():
                try:
                    waited = await admission.acquire(timeout)
                except ToolFailure as refused:
                    return self._metrics.count(action, shed(request_id, refused))
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
        return self._metrics.count(action, outcome)

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
        described["waiting_requests"] = self._admissions.waiting(task_id)
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
        await self._page.drain()

    # -- internals --------------------------------------------------------------------

    def _channel(self, task_id: str) -> TabChannel:
        channel = self._channels.get(task_id)
        if channel is None:
            channel = self._channels[task_id] = TabChannel(task_id, self.config.limits)
        return channel

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
            self._admissions.let_go(task_id)

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
                link = self._links.get(effect.conn)
                if link is not None:
                    self._page.answer(link, effect)
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

    def _start_call(self, channel: TabChannel, effect: StartCall) -> None:
        link = self._links.get(effect.conn)
        if link is None:
            return

        def finished(public: dict[str, Any]) -> None:
            self._apply(channel, channel.call_finished(effect.conn, effect.call_id, public))

        self._page.start(link, effect, finished)
