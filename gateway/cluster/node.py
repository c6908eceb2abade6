"""One node of a cluster: it owns some tasks, routes calls for the others to their owners,
serves the calls routed to it, beats, frees the tasks of dead nodes, and hears of task ends.

Subjects on the bus:
- `gw.call.<node>`: a call for a task `<node>` owns (request-reply, signed);
- `gw.owner`: a task changed owner (so the node that held it lets go, and caches update);
- `gw.ended`: a task ended (every node refuses its tokens and lets go of it); each node
  also reads task ends from the database every `POLL_ENDS_S`, so a lost message costs at
  most that long.

A task's calls all run on its owner (its budget, idempotency locks, tab channel and
browser context are there). A node becomes the owner when the task's tab connects to it
(`take`), or when a call comes for a task nobody owns (`elsewhere` claims it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from gateway.errors import GatewayError, ToolFailure
from gateway.identity import TaskIdentity
from gateway.pipeline import Pipeline
from gateway.ports import ReleaseListener
from gateway.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.tasks import TaskService

from .bus import Bus, BusError, BusTimeout, NoResponder
from .ledger import Ledger, Owner

log = logging.getLogger(__name__)

CALLS = "gw.call.{node}"
OWNER = "gw.owner"
ENDED = "gw.ended"
POLL_ENDS_S = 0.5
# Task ends are read back this far before the newest one seen: ends committed late, or by
# a node whose clock is a little behind, are still found.
ENDS_LOOKBACK_S = 30.0
MISSED_BEATS = 3
# How long another node's ownership is believed without asking the database again; a
# stale belief costs one extra hop (the old owner says it is not the owner).
OWNER_CACHE_S = 2.0
# Time a routed call's envelope stays valid: a call cannot be replayed to an owner later.
ENVELOPE_MAX_AGE_S = 600
# The wait for an owner's answer beyond the tool's own deadline (the hop and the commit).
ROUTE_MARGIN_S = 5.0


class ClusterNode:
    def __init__(
        self,
        node_id: str,
        ledger: Ledger,
        connect_bus: Callable[[], Awaitable[Bus]],
        tasks: TaskService,
        pipeline: Pipeline,
        keys: Callable[[], list[str]],
        *,
        beat_s: float = 1.0,
    ) -> None:
        self.node_id = node_id
        self.ledger = ledger
        self._connect_bus = connect_bus
        self.tasks = tasks
        self.pipeline = pipeline
        self.beat_s = beat_s
        self._keys = keys
        self._signer: URLSafeTimedSerializer | None = None
        self._bus: Bus | None = None
        self._mine: dict[str, int] = {}  # tasks this node owns, and their epoch
        self._others: dict[str, tuple[Owner, float]] = {}  # believed owners, and since when
        # Tasks taken from a node that had opened their browser context: told once.
        self._browser_moved: dict[str, str] = {}
        self._release: list[ReleaseListener] = []
        self._ends_seen = 0.0
        # Ends heard from other nodes: told to this node's listeners, not announced again.
        self._heard: set[str] = set()
        self._loops: list[asyncio.Task[None]] = []
        self.routed_out = 0
        self.routed_in = 0

    # -- lifetime -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # The newest key signs; every key verifies (the same rotation as task tokens).
        self._signer = URLSafeTimedSerializer(
            list(reversed(self._keys())), salt="gateway.cluster.routed-call"
        )
        self._bus = await self._connect_bus()
        try:
            await self.ledger.join()
            self._ends_seen = await self.ledger.now()
            await self._bus.subscribe(CALLS.format(node=self.node_id), self._serve_call)
            await self._bus.subscribe(OWNER, self._heard_owner)
            await self._bus.subscribe(ENDED, self._heard_end)
            self._loops = [
                asyncio.create_task(self._beat_forever(), name="cluster-beat"),
                asyncio.create_task(self._poll_ends_forever(), name="cluster-ends"),
            ]
            self.tasks.revoke_with(self.ledger.revoke)
            self.tasks.on_end(self._announce_end)
            yield
        finally:
            for loop in self._loops:
                loop.cancel()
            await asyncio.gather(*self._loops, return_exceptions=True)
            with contextlib.suppress(GatewayError):
                freed = await self.ledger.leave()
                for task_id in freed:
                    await self._tell_owner(task_id, None)
            await self._bus.close()

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the cluster node is not started")
        return self._bus

    def on_release(self, listener: ReleaseListener) -> None:
        self._release.append(listener)

    def owned(self) -> dict[str, int]:
        return dict(self._mine)

    def describe(self, task_id: str) -> dict[str, Any]:
        """Where the task lives, as `GET /v1/tasks/{id}` says it on this node."""
        if task_id in self._mine:
            return {"node_id": self.node_id, "owner": self.node_id, "epoch": self._mine[task_id]}
        believed = self._others.get(task_id)
        owner = believed[0] if believed is not None else None
        return {
            "node_id": self.node_id,
            "owner": owner.node_id if owner else None,
            "epoch": owner.epoch if owner else None,
        }

    @property
    def _envelopes(self) -> URLSafeTimedSerializer:
        if self._signer is None:
            raise RuntimeError("the cluster node is not started")
        return self._signer

    # -- the Placement port ---------------------------------------------------------------

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
        task_id = identity.task_id
        for _ in range(2):  # a stale belief about the owner costs one more try
            node = await self._route(task_id)
            if node is None:
                return None
            answer = await self._forward(
                node, task_id, tool_name, args, door, idempotency_key, call_id, timeout_s
            )
            if answer is not None:
                return answer
            self._others.pop(task_id, None)
        raise ToolFailure(
            ToolStatus.UNAVAILABLE,
            ErrorCode.UNAVAILABLE,
            "the task is changing gateway nodes; nothing was done",
            retryable=True,
            details={"retry_after_s": 1},
        )

    async def fence(
        self, identity: TaskIdentity, tool_name: str, idempotency_key: str | None, call_id: str
    ) -> int:
        task_id = identity.task_id
        epoch = self._mine.get(task_id)
        if epoch is None:
            raise _not_here()
        if idempotency_key is not None:
            intent = await self.ledger.intent(task_id, tool_name, idempotency_key)
            if intent is not None and (intent.node_id, intent.epoch) != (self.node_id, epoch):
                raise ToolFailure(
                    ToolStatus.FAILED,
                    ErrorCode.IN_DOUBT,
                    f"a call with idempotency key {idempotency_key!r:.80} started on node "
                    f"{intent.node_id}, which stopped before recording its outcome; it may "
                    "or may not have taken effect, and it is not run again",
                    details={"call_id": intent.call_id, "node_id": intent.node_id},
                )
        intent_row = (tool_name, idempotency_key, call_id) if idempotency_key is not None else None
        if await self.ledger.fence(task_id, epoch, intent_row):
            return epoch
        owner = await self.ledger.owner(task_id)
        if owner is not None and owner.revoked:
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
        await self._lose(task_id)
        raise _not_here()

    def commit_guard(self, task_id: str, epoch: int) -> tuple[Any, dict[str, Any]]:
        return self.ledger.commit_guard(task_id, epoch)

    def browser_moved(self, task_id: str) -> str | None:
        return self._browser_moved.pop(task_id, None)

    async def browser_opened(self, task_id: str) -> None:
        epoch = self._mine.get(task_id)
        if epoch is not None:
            try:
                await self.ledger.browser_opened(task_id, epoch)
            except GatewayError as exc:
                log.warning("cluster: a browser context of %s was not noted: %s", task_id, exc)

    async def take(self, task_id: str) -> None:
        owner = await self.ledger.claim(task_id, take_over=True)
        if owner.node_id != self.node_id:
            return  # ended: the tab's own checks refuse it
        if self._mine.get(task_id) != owner.epoch:
            self._own(task_id, owner)
            await self._tell_owner(task_id, owner)

    # -- routing ------------------------------------------------------------------------

    async def _route(self, task_id: str) -> str | None:
        """The node to send the task's call to, or None to run it here."""
        if task_id in self._mine:
            return None
        believed = self._others.get(task_id)
        if believed is not None and time.monotonic() - believed[1] < OWNER_CACHE_S:
            owner = believed[0]
        else:
            found = await self.ledger.owner(task_id)
            owner = found if found is not None else Owner(None, 0, False)
        if owner.node_id is None and not owner.revoked:
            owner = await self.ledger.claim(task_id, take_over=False)
            if owner.node_id == self.node_id:
                self._own(task_id, owner)
                await self._tell_owner(task_id, owner)
                return None
        if owner.node_id is None or owner.revoked:
            return None  # ended: the call is refused here, as anywhere
        if owner.node_id == self.node_id:
            # The ledger says so but this process does not hold it (it restarted, or let
            # go): claim it anew, under a new epoch.
            owner = await self.ledger.claim(task_id, take_over=True)
            if owner.node_id == self.node_id:
                self._own(task_id, owner)
                await self._tell_owner(task_id, owner)
            return None
        self._others[task_id] = (owner, time.monotonic())
        return owner.node_id

    async def _forward(
        self,
        node: str,
        task_id: str,
        tool_name: str,
        args: Any,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        timeout_s: float,
    ) -> ToolResult | None:
        envelope = self._envelopes.dumps(
            {
                "task_id": task_id,
                "tool": tool_name,
                "input": args,
                "door": door.value,
                "key": idempotency_key,
                "call_id": call_id,
            }
        )
        self.routed_out += 1
        try:
            reply = await self.bus.request(
                CALLS.format(node=node), envelope.encode(), timeout_s + ROUTE_MARGIN_S
            )
        except NoResponder:
            self._others.pop(task_id, None)
            raise ToolFailure(
                ToolStatus.UNAVAILABLE,
                ErrorCode.UNAVAILABLE,
                f"the gateway node that holds this task ({node}) is not answering; another "
                "takes the task over within a few seconds; nothing was done",
                retryable=True,
                details={"retry_after_s": math.ceil(self.beat_s * (MISSED_BEATS + 1))},
            ) from None
        except BusTimeout:
            raise ToolFailure(
                ToolStatus.TIMEOUT,
                ErrorCode.TIMEOUT,
                f"the gateway node that holds this task ({node}) did not answer in time; "
                "with an idempotency key, a retry says whether the call took effect",
                retryable=True,
            ) from None
        except BusError as exc:
            raise ToolFailure(
                ToolStatus.UNAVAILABLE,
                ErrorCode.UNAVAILABLE,
                f"the gateway's cluster bus is unavailable ({exc}); nothing was done",
                retryable=True,
                details={"retry_after_s": 1},
            ) from None
        answer = json.loads(reply)
        if answer.get("not_owner"):
            return None
        return ToolResult.model_validate(answer["result"])

    async def _serve_call(self, data: bytes) -> bytes:
        try:
            call = self._envelopes.loads(data.decode(), max_age=ENVELOPE_MAX_AGE_S)
        except (BadSignature, UnicodeDecodeError):
            log.warning("cluster: refused a routed call with a bad signature")
            return json.dumps({"not_owner": True}).encode()
        task_id = call["task_id"]
        record = await self.tasks.record(task_id)
        if task_id not in self._mine or record is None:
            return json.dumps({"not_owner": True}).encode()
        self.routed_in += 1
        result = await self.pipeline.call(
            record.identity,
            call["tool"],
            call["input"],
            door=Door(call["door"]),
            idempotency_key=call["key"],
            call_id=call["call_id"],
            routed=True,
        )
        return json.dumps({"result": result.model_dump(mode="json")}).encode()

    # -- owners ---------------------------------------------------------------------------

    def _own(self, task_id: str, owner: Owner) -> None:
        self._mine[task_id] = owner.epoch
        self._others.pop(task_id, None)
        if owner.browser_lost:
            self._browser_moved[task_id] = (
                "the task's browser context was on another gateway node, which no longer "
                "holds the task; it is lost, and the next call gets a new one"
            )

    async def _lose(self, task_id: str) -> None:
        if self._mine.pop(task_id, None) is None:
            return
        await self.pipeline.forget(task_id, "moved")
        results = await asyncio.gather(
            *(listener(task_id) for listener in self._release), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("cluster: letting go of %s failed: %r", task_id, result)

    async def _tell_owner(self, task_id: str, owner: Owner | None) -> None:
        message = {
            "task_id": task_id,
            "node_id": owner.node_id if owner else None,
            "epoch": owner.epoch if owner else None,
        }
        with contextlib.suppress(BusError):
            await self.bus.publish(OWNER, json.dumps(message).encode())

    async def _heard_owner(self, data: bytes) -> None:
        message = json.loads(data)
        task_id, node = message["task_id"], message["node_id"]
        if node == self.node_id:
            return
        if node is not None:
            self._others[task_id] = (Owner(node, int(message["epoch"]), False), time.monotonic())
        else:
            self._others.pop(task_id, None)
        mine = self._mine.get(task_id)
        if mine is not None and (message["epoch"] is None or message["epoch"] > mine):
            await self._lose(task_id)
        return None

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
            # given to others. Let go of all of it and join again, as a new incarnation.
            log.warning("cluster: this node was declared dead; joining again")
            for task_id in list(self._mine):
                await self._lose(task_id)
            await self.ledger.rejoin()
        for node, freed in (await self.ledger.reap(self.beat_s * MISSED_BEATS)).items():
            log.warning("cluster: node %s missed its beats; %d tasks freed", node, len(freed))
            for task_id in freed:
                await self._tell_owner(task_id, None)

    # -- task ends ------------------------------------------------------------------------

    async def _announce_end(self, task_id: str, reason: str) -> None:
        self._mine.pop(task_id, None)
        self._others.pop(task_id, None)
        if task_id in self._heard:
            return
        message = {"task_id": task_id, "reason": reason, "at": time.time()}
        with contextlib.suppress(BusError):
            await self.bus.publish(ENDED, json.dumps(message).encode())

    async def _heard_end(self, data: bytes) -> None:
        message = json.loads(data)
        await self._ended_elsewhere(message["task_id"], message["at"], message["reason"])
        return None

    async def _ended_elsewhere(self, task_id: str, at: float, reason: str) -> None:
        self._heard.add(task_id)
        try:
            await self.tasks.ended_elsewhere(task_id, at, reason)
        finally:
            self._heard.discard(task_id)

    async def _poll_ends_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_ENDS_S)
            try:
                for ended in await self.ledger.ended_since(self._ends_seen - ENDS_LOOKBACK_S):
                    self._ends_seen = max(self._ends_seen, ended.revoked_at)
                    await self._ended_elsewhere(ended.task_id, ended.revoked_at, ended.reason)
            except GatewayError as exc:
                log.warning("cluster: reading task ends failed: %s", exc)


def _not_here() -> ToolFailure:
    return ToolFailure(
        ToolStatus.UNAVAILABLE,
        ErrorCode.UNAVAILABLE,
        "this gateway node no longer holds the task; retry, and the call goes to the node "
        "that does; nothing was done",
        retryable=True,
        details={"retry_after_s": 1},
    )
