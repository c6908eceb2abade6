"""One node of a cluster: it owns some tasks, routes the calls and errands of the others to
their owners and serves those routed to it (`rpc.py`), beats, frees the tasks of dead
nodes, and tells and hears of owner changes and task ends (`ends.py`). Its side effects are
fenced to the tasks it owns (`fencing.py`, built before the pipeline it is given); its
doors' calls go through `routing.py` (`calls`).

Besides the routed envelopes, two broadcasts cross the bus, sealed like every message
(`envelope.py`), so a publisher on the bus without the keys can neither end a task nor
move one: `gw.owner` (a task changed owner, or was let go, so the node that held it lets
go) and `gw.ended` (a task ended).

A task's calls all run on its owner (its budget, idempotency locks, tab channel and
browser context are there). A node becomes the owner when the task's tab connects to it
(`take`), or when a call comes for a task nobody owns (`elsewhere` claims it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.pipeline import Pipeline
from gateway.core.ports import Errand, ReleaseListener
from gateway.core.results import Door, ErrorCode, ToolResult
from gateway.core.tasks.service import TaskService

from .bus import Bus, BusError
from .ends import Ends
from .envelope import Envelopes, sealer
from .fencing import NodeFencing, ended
from .owners import Freed, Owner, Owners
from .routing import Routing
from .rpc import CALL, ERRAND, ErrandError, Job, Kind, Rpc, changing_nodes
from .subjects import CALLS, ENDED, ERRANDS, OWNER

__all__ = ["CALLS", "ENDED", "ERRANDS", "OWNER", "ClusterNode", "ErrandError", "sealer"]

log = logging.getLogger(__name__)
MISSED_BEATS = 3
# The wait for an owner's answer beyond the call's own time (the hop and the commit).
ROUTE_MARGIN_S = 5.0
# Routed envelopes (calls, errands) an owner remembers having taken until their window
# closes (their wait, then one second): a replay within it runs nothing, one after it is
# refused as sent too long ago. Past this many open windows, new envelopes are refused
# rather than an open window forgotten.
SEEN_CALLS = 100_000
# The wait for an owner to do an errand (a person's answer: a database write).
ERRAND_WAIT_S = 10.0

# Where a task's envelope goes: the node that holds it, or None to do it here.
Route = Callable[[str], Awaitable[str | None]]


class ClusterNode:
    def __init__(
        self,
        fencing: NodeFencing,
        connect_bus: Callable[[], Awaitable[Bus]],
        tasks: TaskService,
        pipeline: Pipeline,
        keys: Callable[[], list[str]],
        *,
        beat_s: float = 1.0,
    ) -> None:
        """`fencing`: what `pipeline` was built fenced with (its node id, ledger and owners
        are this node's)."""
        self.node_id = fencing.node_id
        self.ledger = fencing.ledger
        self.owners: Owners = fencing.owners
        # What fences the pipeline's side effects to this node's tasks; a fence that finds
        # another owner makes the node let go of the task.
        self.fencing = fencing
        fencing.on_lost(self._lose)
        self._connect_bus = connect_bus
        self.tasks = tasks
        self.pipeline = pipeline
        # What the doors run calls with: each on its task's owner.
        self.calls = Routing(pipeline, self)
        self.beat_s = beat_s
        self._keys = keys
        self._rpc: Rpc | None = None
        self.ends = Ends(self.ledger, tasks, self.owners, self._broadcast)
        self._release: list[ReleaseListener] = []
        self._errands: dict[str, Errand] = {}
        self._loops: list[asyncio.Task[None]] = []
        self.routed_out = 0
        self.routed_in = 0

    # -- lifetime -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        envelopes = Envelopes(self.node_id, self._keys(), remember=SEEN_CALLS)
        bus = await self._connect_bus()
        gone_retry_s = math.ceil(self.beat_s * (MISSED_BEATS + 1))
        self._rpc = Rpc(envelopes, bus, gone_retry_s=gone_retry_s)
        try:
            await self._tell_freed(await self.ledger.join())
            await bus.subscribe(CALLS.format(node=self.node_id), self._serve_call)
            await bus.subscribe(ERRANDS.format(node=self.node_id), self._serve_errand)
            await bus.subscribe(OWNER, self._heard_owner)
            await bus.subscribe(ENDED, self._heard_end)
            self._loops = [
                asyncio.create_task(self._beat_forever(), name="cluster-beat"),
                asyncio.create_task(self.ends.read_forever(), name="cluster-ends"),
            ]
            self.tasks.revoke_with(self.ledger.revoke)
            self.tasks.on_end(self.ends.announce)
            yield
        finally:
            for loop in self._loops:
                loop.cancel()
            await asyncio.gather(*self._loops, return_exceptions=True)
            with contextlib.suppress(GatewayError):
                await self._tell_freed(await self.ledger.leave())
            await bus.close()
            await self.ledger.close()

    @property
    def rpc(self) -> Rpc:
        if self._rpc is None:
            raise RuntimeError("the cluster node is not started")
        return self._rpc

    @property
    def bus(self) -> Bus:
        return self.rpc.bus

    def on_release(self, listener: ReleaseListener) -> None:
        self._release.append(listener)

    def owned(self) -> dict[str, int]:
        return self.owners.held()

    def describe(self, task_id: str) -> dict[str, Any]:
        """Where the task lives, as `GET /v1/tasks/{id}` says it on this node."""
        return self.owners.describe(task_id)

    def _seal(self, purpose: str, value: Any) -> bytes:
        return self.rpc.envelopes.seal(purpose, value)

    # -- the Placement port, and where calls run (`routing.py`) -------------------------

    async def elsewhere(
        self,
        identity: TaskIdentity,
        tool_name: str,
        args: Any,
        *,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        timeout_s: float,
    ) -> ToolResult | None:
        policy = identity.approvals
        # The owner may wait for a person too, which the tool's deadline does not count.
        wait_s = timeout_s + ROUTE_MARGIN_S
        if policy.required or policy.grantable:
            wait_s += policy.timeout_s
        call = {
            "task_id": identity.task_id,
            "tool": tool_name,
            "input": args,
            "door": door.value,
            "key": idempotency_key,
            "call_id": call_id,
            "wait_s": wait_s,
        }
        answer = await self._at_owner(
            CALL, call, self._route_call, keyed=idempotency_key is not None
        )
        return None if answer is None else ToolResult.model_validate(answer)

    def browser_moved(self, task_id: str) -> str | None:
        return self.owners.browser_moved(task_id)

    async def browser_opened(self, task_id: str) -> None:
        epoch = self.owners.epoch(task_id)
        if epoch is not None:
            try:
                await self.ledger.browser_opened(task_id, epoch)
            except GatewayError as exc:
                log.warning("cluster: a browser context of %s was not noted: %s", task_id, exc)

    async def take(self, task_id: str) -> None:
        owner = await self.ledger.claim(task_id, take_over=True)
        if owner.revoked or owner.node_id != self.node_id:
            return  # ended: the tab's own checks refuse it
        if self.owners.epoch(task_id) != owner.epoch:
            await self._own(task_id, owner)

    def serve_errand(self, name: str, errand: Errand) -> None:
        self._errands[name] = errand

    async def at_owner(
        self, task_id: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The owner's answer to the errand `name`, when another node owns the task; None
        when it is done here: this node owns the task, or no live node does (the questions
        a freed task's node left are closed with the freeing). It claims nothing: a
        person's answer does not move a task."""
        errand = {
            "task_id": task_id,
            "errand": name,
            "body": body,
            "id": new_id("errand"),
            "wait_s": ERRAND_WAIT_S,
        }
        answer: dict[str, Any] | None = await self._at_owner(ERRAND, errand, self._route_errand)
        return answer

    # -- routing --------------------------------------------------------------------------

    async def _at_owner(
        self, kind: Kind, envelope: dict[str, Any], route: Route, *, keyed: bool = False
    ) -> Any:
        """The answer of the task's owner to `envelope`, sent where `route` says; None when
        it is done here."""
        task_id = envelope["task_id"]
        for _ in range(2):  # a stale belief about the owner costs one more try
            node = await route(task_id)
            if node is None:
                return None
            try:
                answer = await self.rpc.request(
                    kind,
                    node,
                    {**envelope, "to": node},
                    reply_age_s=envelope["wait_s"] + ROUTE_MARGIN_S,
                    keyed=keyed,
                )
            except GatewayError:
                self.owners.doubt(task_id)  # believed again only once its owner answers
                raise
            if answer is not None:
                return answer
            self.owners.doubt(task_id)
        raise changing_nodes()

    async def _route_call(self, task_id: str) -> str | None:
        """The node to send the task's call to, or None to run it here (this node holds
        the task, or has just claimed it)."""
        if self.owners.epoch(task_id) is not None:
            return None
        owner = self.owners.believed(task_id, time.monotonic())
        if owner is None:
            found = await self.ledger.owner(task_id)
            owner = found if found is not None else Owner(None, 0, False)
        if owner.revoked:
            await self.ends.ended_elsewhere(task_id, time.time(), "ended")
            raise ended()
        if owner.node_id is None or owner.node_id == self.node_id:
            # Nobody holds it; or the ledger names this node, which does not hold it (it
            # restarted, or let go): claim it, under a new epoch.
            owner = await self.ledger.claim(task_id, take_over=owner.node_id is not None)
            if owner.revoked:
                raise ended()
            if owner.node_id == self.node_id:
                await self._own(task_id, owner)
                return None
        assert owner.node_id is not None
        self.owners.believe(task_id, owner, time.monotonic())
        self.routed_out += 1
        return owner.node_id

    async def _route_errand(self, task_id: str) -> str | None:
        """The node to send the task's errand to: its live owner, when that is another."""
        if self.owners.epoch(task_id) is not None:
            return None
        owner = await self.ledger.owner(task_id)
        if owner is None or owner.revoked or owner.node_id in (None, self.node_id):
            return None
        return owner.node_id

    async def _serve_call(self, data: bytes) -> bytes | None:
        return await self.rpc.serve(CALL, data, self._routed_call, self._holder)

    async def _serve_errand(self, data: bytes) -> bytes | None:
        return await self.rpc.serve(ERRAND, data, self._errand, self._holder)

    async def _holder(self, task_id: str) -> TaskIdentity | None:
        """The task, while this node holds it."""
        record = await self.tasks.record(task_id)
        if record is None or self.owners.epoch(task_id) is None:
            return None
        return record.identity

    def _routed_call(self, call: dict[str, Any]) -> Job:
        async def run(identity: TaskIdentity) -> dict[str, Any]:
            self.routed_in += 1
            result = await self.pipeline.call(
                identity,
                call["tool"],
                call["input"],
                door=Door(call["door"]),
                idempotency_key=call["key"],
                call_id=call["call_id"],
            )
            return result.model_dump(mode="json")

        return run

    def _errand(self, envelope: dict[str, Any]) -> Job:
        name = envelope.get("errand")
        errand = self._errands.get(name) if isinstance(name, str) else None
        if errand is None:
            raise ErrandError(
                f"node {self.node_id} does no errand {str(name)[:64]!r}",
                code=ErrorCode.HANDLER_ERROR,
                http_status=500,
            )
        return lambda identity: errand(identity, envelope["body"])

    # -- owners and ends ------------------------------------------------------------------

    async def _own(self, task_id: str, owner: Owner) -> None:
        if self.owners.take(task_id, owner):
            await self._tell_owner(task_id, self.node_id, owner.epoch)

    async def _lose(self, task_id: str) -> None:
        if not self.owners.let_go(task_id):
            return
        await self.pipeline.forget(task_id, "moved")
        await self.fencing.release(task_id)
        results = await asyncio.gather(
            *(listener(task_id) for listener in self._release), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("cluster: letting go of %s failed: %r", task_id, result)

    async def _tell_owner(self, task_id: str, node: str | None, epoch: int) -> None:
        await self._broadcast(OWNER, {"task_id": task_id, "node_id": node, "epoch": epoch})

    async def _heard_owner(self, data: bytes) -> None:
        message = self.rpc.envelopes.verify("message", data)
        if message is None:
            return None
        task_id, node, epoch = message["task_id"], message["node_id"], int(message["epoch"])
        if self.owners.heard(task_id, node, epoch, time.monotonic()):
            await self._lose(task_id)
        return None

    async def _heard_end(self, data: bytes) -> None:
        message = self.rpc.envelopes.verify("message", data)
        if message is not None:
            await self.ends.heard(message)
        return None

    async def _broadcast(self, subject: str, message: dict[str, Any]) -> None:
        with contextlib.suppress(BusError):
            await self.bus.publish(subject, self._seal("message", message))

    # -- beats ----------------------------------------------------------------------------

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            try:
                await self._beat()
            except GatewayError as exc:
                log.warning("cluster: a beat failed: %s", exc)

    async def _beat(self) -> None:
        if not await self.ledger.beat():
            # Declared dead while it could not beat (paused, cut off): what it held was
            # given to others. Join again first, as a new incarnation (a tab that comes
            # back meanwhile is taken under it), then let go of what it held before.
            log.warning("cluster: this node was declared dead; joining again")
            held = self.owners.held()
            await self._tell_freed(await self.ledger.rejoin())
            for task_id, epoch in held.items():
                if self.owners.epoch(task_id) == epoch:
                    await self._lose(task_id)
        for node, tasks in (await self.ledger.reap(self.beat_s * MISSED_BEATS)).items():
            log.warning("cluster: node %s missed its beats; %d tasks freed", node, len(tasks))
            await self._tell_freed(tasks)

    async def _tell_freed(self, freed: list[Freed]) -> None:
        for task in freed:
            await self._tell_owner(task.task_id, None, task.epoch)
