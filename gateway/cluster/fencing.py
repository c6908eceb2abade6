"""Fencing on a node of a cluster (`ports.Fencing`): a side effect runs only while this node
owns its task, under the owner epoch its evidence then commits under, and the handlers
running for a task are cancelled when the node loses it.

Built before the pipeline it fences, and so before the node: the node hears of a fence that
found another owner through `on_lost`, which it subscribes to when it is built."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ports import Fenced, ReleaseListener
from gateway.core.results import ErrorCode, ToolStatus

from .ledger import Ledger
from .owners import Owners


class NodeFencing:
    """The fences of one node's side effects, and the handlers it runs, by task."""

    def __init__(self, node_id: str, ledger: Ledger, owners: Owners) -> None:
        self.node_id = node_id
        self.ledger = ledger
        self.owners = owners
        # What the node does when a fence finds another owner: it lets go of the task.
        self._lost: list[ReleaseListener] = []
        # Handlers running, by task: a node that loses a task cancels them.
        self._handlers: dict[str, set[asyncio.Future[Any]]] = {}

    async def fence(
        self, identity: TaskIdentity, tool_name: str, idempotency_key: str | None, call_id: str
    ) -> Fenced:
        task_id = identity.task_id
        epoch = self.owners.epoch(task_id)
        if epoch is None:
            raise not_here()
        if idempotency_key is not None:
            intent = await self.ledger.intent(task_id, tool_name, idempotency_key)
            if intent is not None and (intent.node_id, intent.epoch) != (self.node_id, epoch):
                found, code = await self.ledger.outcome(intent.call_id)
                if not found or code == ErrorCode.IN_DOUBT:
                    raise ToolFailure(
                        ToolStatus.FAILED,
                        ErrorCode.IN_DOUBT,
                        f"a call with idempotency key {idempotency_key!r:.80} started on node "
                        f"{intent.node_id}, which lost the task before recording its outcome; "
                        "it may or may not have taken effect, and it is not run again",
                        details={"call_id": intent.call_id, "node_id": intent.node_id},
                    )
        intent_row = (tool_name, idempotency_key, call_id) if idempotency_key is not None else None
        if await self.ledger.fence(task_id, epoch, intent_row):
            return Fenced(self.node_id, epoch, self.ledger.commit_guard(task_id, epoch))
        owner = await self.ledger.owner(task_id)
        if owner is not None and owner.revoked:
            raise ended()
        for lost in self._lost:
            await lost(task_id)
        raise not_here()

    def on_lost(self, listener: ReleaseListener) -> None:
        """Call `listener(task_id)` when a fence finds that another node owns the task."""
        self._lost.append(listener)

    def running(self, task_id: str, handler: asyncio.Future[Any]) -> None:
        running = self._handlers.setdefault(task_id, set())
        running.add(handler)

        def done(_f: asyncio.Future[Any]) -> None:
            running.discard(handler)
            if not running and self._handlers.get(task_id) is running:
                del self._handlers[task_id]

        handler.add_done_callback(done)

    async def release(self, task_id: str) -> None:
        """Another node holds the task now: the handlers still running for it here are
        cancelled (a side effect under way is cut short; its record says in doubt)."""
        for handler in list(self._handlers.get(task_id, ())):
            handler.cancel()


def ended() -> ToolFailure:
    return ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")


def not_here() -> ToolFailure:
    return ToolFailure(
        ToolStatus.UNAVAILABLE,
        ErrorCode.UNAVAILABLE,
        "this gateway node no longer holds the task; retry, and the call goes to the node "
        "that does; nothing was done",
        retryable=True,
        details={"retry_after_s": 1},
    )
