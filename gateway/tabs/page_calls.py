"""What a tab's page starts in the gateway: its tool calls, run through the pipeline under
the tab's identity, and its answers to approvals, handed to the approvals desk. Each runs
in a task of its own, awaited when the hub stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from prometheus_client import Counter

from gateway.core.errors import GatewayError
from gateway.core.ports import ApprovalDesk, CallRunner, EventRecorder
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.tabs import frames
from gateway.tabs.effects import Answer, StartCall
from gateway.tabs.link import TabLink
from gateway.tabs.outcome import failure

log = logging.getLogger(__name__)


class PageCalls:
    def __init__(
        self,
        *,
        calls: CallRunner,
        events: EventRecorder,
        desk: ApprovalDesk | None,
        rejected: Counter,
    ) -> None:
        self.calls = calls
        self.events = events
        self.desk = desk
        self.rejected = rejected
        self._background: set[asyncio.Task[Any]] = set()

    def start(
        self, link: TabLink, effect: StartCall, finished: Callable[[dict[str, Any]], None]
    ) -> None:
        """Run the page's tool call; `finished` gets its public result."""
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
            finished(public)

        self._spawn(run())

    def answer(self, link: TabLink, effect: Answer) -> None:
        """Hand a person's answer given in the tab to the desk; a refusal is recorded and
        told to the tab."""
        if self.desk is None:
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

    async def drain(self) -> None:
        """Wait for every call and answer still running."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
