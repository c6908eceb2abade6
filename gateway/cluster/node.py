"""One node of a cluster: it owns some tasks, routes calls for the others to their owners,
serves the calls routed to it, beats, frees the tasks of dead nodes, and hears of task ends.

Subjects on the bus (`subjects.py`, each node allowed only its own), every message sealed
with the gateway's keys (`sealing.py`: unreadable without them, and a node that cannot open
one ignores it, so a publisher on the bus without the keys can neither end a task, nor move
one, nor answer for an owner):
- `gw.call.<node>`: a call for a task `<node>` owns (request-reply); the envelope names
  the node it is for, expires with the call's deadline, and runs once;
- `gw.errand.<node>`: something other than a call that only the owner can do for a task
  (a person's answer to an approval the owner waits on), sealed and run once the same way;
- `gw.owner`: a task changed owner, or was let go (so the node that held it lets go);
- `gw.ended`: a task ended (every node refuses its tokens and lets go of it); each node
  also reads the ends committed in the last `ENDS_LOOKBACK_S` every `POLL_ENDS_S`, so a lost
  message costs at most that long.

A routed call or errand ends only with the owner's own sealed answer to it: a reply that
does not open, answers another envelope or comes from another node is set aside and the
wait goes on; past the deadline with only such replies, the sender says `in_doubt` (it may
have run), never "nothing was done".

A task's calls all run on its owner (its budget, idempotency locks, tab channel and
browser context are there). A node becomes the owner when the task's tab connects to it
(`take`), or when a call comes for a task nobody owns (`elsewhere` claims it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.errors import GatewayError, InDoubt, ToolFailure
from gateway.identity import TaskIdentity
from gateway.ids import new_id
from gateway.pipeline import Pipeline
from gateway.ports import Errand, ReleaseListener
from gateway.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.tasks import TaskService

from .bus import Bus, BusError, BusTimeout, NoResponder
from .ledger import Freed, Ledger, Owner
from .sealing import Sealer, Unsealable
from .subjects import CALLS, ENDED, ERRANDS, OWNER

__all__ = ["CALLS", "ENDED", "ERRANDS", "OWNER", "ClusterNode", "ErrandError", "sealer"]

log = logging.getLogger(__name__)
POLL_ENDS_S = 0.5
# Task ends are read back this far (on the database's clock): an end whose message was
# lost, or committed a moment late, is still found.
ENDS_LOOKBACK_S = 30.0
MISSED_BEATS = 3
# How long another node's ownership is believed without asking the database again; a
# stale belief costs one extra hop (the old owner says it is not the owner).
OWNER_CACHE_S = 2.0
# The wait for an owner's answer beyond the call's own time (the hop and the commit).
ROUTE_MARGIN_S = 5.0
# Routed envelopes (calls, errands) an owner remembers having taken until their window
# closes (their wait, then one second): a replay within it runs nothing, one after it is
# refused as sent too long ago. Past this many open windows, new envelopes are refused
# rather than an open window forgotten.
SEEN_CALLS = 100_000
# Tasks whose newest owner epoch is remembered.
NEWEST_EPOCHS = 10_000
# A sealed broadcast older than this is ignored (a replay; the bus delivers in milliseconds).
ENVELOPE_MAX_AGE_S = 600
# How far ahead of a reader's clock a message's seal may be (two machines' clocks agree
# only so well).
CLOCK_SKEW_S = 2.0
# The wait for an owner to do an errand (a person's answer: a database write).
ERRAND_WAIT_S = 10.0


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
        self._sealers: dict[str, Sealer] = {}
        self._bus: Bus | None = None
        self._mine: dict[str, int] = {}  # tasks this node owns, and their epoch
        self._others: dict[str, tuple[Owner, float]] = {}  # believed owners, and since when
        # The newest epoch heard of per task: a claim answered after a newer one was heard
        # of is not taken up.
        self._newest: OrderedDict[str, int] = OrderedDict()
        # Tasks taken from a node that had opened their browser context: told once.
        self._browser_moved: dict[str, str] = {}
        self._release: list[ReleaseListener] = []
        # Ends heard from other nodes: told to this node's listeners, not announced again.
        self._heard: set[str] = set()
        self._seen_calls: OrderedDict[str, float] = OrderedDict()
        self._errands: dict[str, Errand] = {}
        self._loops: list[asyncio.Task[None]] = []
        self.routed_out = 0
        self.routed_in = 0

    # -- lifetime -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        keys = self._keys()
        self._sealers = {
            purpose: sealer(keys, purpose) for purpose in ("call", "errand", "reply", "message")
        }
        self._bus = await self._connect_bus()
        try:
            await self._tell_freed(await self.ledger.join())
            await self._bus.subscribe(CALLS.format(node=self.node_id), self._serve_call)
            await self._bus.subscribe(ERRANDS.format(node=self.node_id), self._serve_errand)
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
                await self._tell_freed(await self.ledger.leave())
            await self._bus.close()
            await self.ledger.close()

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

    # -- sealing --------------------------------------------------------------------------

    def _seal(self, purpose: str, value: Any) -> bytes:
        if not self._sealers:
            raise RuntimeError("the cluster node is not started")
        return self._sealers[purpose].seal(value)

    def _reply(self, value: dict[str, Any]) -> bytes:
        """A reply, sealed and naming this node: a sender takes only its addressee's."""
        return self._seal("reply", {**value, "by": self.node_id})

    def _open(self, purpose: str, data: bytes, max_age_s: float) -> tuple[Any, float] | None:
        """The sealed value and when it was sealed, or None when the seal, purpose or age
        is wrong."""
        try:
            value, sealed_at = self._sealers[purpose].open(data)
        except (Unsealable, ValueError, KeyError, TypeError):
            log.warning("cluster: ignored a %s message that does not open", purpose)
            return None
        age = time.time() - sealed_at
        if not -CLOCK_SKEW_S <= age <= max_age_s + 1:
            log.warning("cluster: ignored a %s message sealed %.1f s ago", purpose, age)
            return None
        return value, sealed_at

    def _verify(self, purpose: str, data: bytes, max_age_s: float) -> Any:
        opened = self._open(purpose, data, max_age_s)
        return opened[0] if opened is not None else None

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
        policy = identity.approvals
        # The owner may wait for a person too, which the tool's deadline does not count.
        wait_s = timeout_s + ROUTE_MARGIN_S
        if policy.required or policy.grantable:
            wait_s += policy.timeout_s
        for _ in range(2):  # a stale belief about the owner costs one more try
            node = await self._route(task_id)
            if node is None:
                return None
            call = {
                "to": node,
                "task_id": task_id,
                "tool": tool_name,
                "input": args,
                "door": door.value,
                "key": idempotency_key,
                "call_id": call_id,
                "wait_s": wait_s,
            }
            answer = await self._forward(node, call, wait_s)
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
        if owner.revoked or owner.node_id != self.node_id:
            return  # ended: the tab's own checks refuse it
        if self._mine.get(task_id) != owner.epoch:
            await self._own(task_id, owner)

    # -- routing --------------------------------------------------------------------------

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
        if owner.revoked:
            await self._ended_elsewhere(task_id, time.time(), "ended")
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
        if owner.node_id is None or owner.node_id == self.node_id:
            # Nobody holds it; or the ledger names this node, which does not hold it (it
            # restarted, or let go): claim it, under a new epoch.
            owner = await self.ledger.claim(task_id, take_over=owner.node_id is not None)
            if owner.revoked:
                raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
            if owner.node_id == self.node_id:
                await self._own(task_id, owner)
                return None
        assert owner.node_id is not None
        self._others[task_id] = (owner, time.monotonic())
        return owner.node_id

    async def _forward(self, node: str, call: dict[str, Any], wait_s: float) -> ToolResult | None:
        self.routed_out += 1
        sent = self._seal("call", call)

        def accept(reply: bytes) -> dict[str, Any] | None:
            return self._answer(reply, node, "call_id", call["call_id"], sent, wait_s)

        try:
            answer = await self.bus.request(CALLS.format(node=node), sent, wait_s, accept)
        except NoResponder:
            self._others.pop(call["task_id"], None)
            raise ToolFailure(
                ToolStatus.UNAVAILABLE,
                ErrorCode.UNAVAILABLE,
                f"the gateway node that holds this task ({node}) is not answering; another "
                "takes the task over within a few seconds; nothing was done",
                retryable=True,
                details={"retry_after_s": math.ceil(self.beat_s * (MISSED_BEATS + 1))},
            ) from None
        except BusTimeout as exc:
            keyed = call["key"] is not None
            if exc.refused:
                raise _in_doubt(node, {"call_id": call["call_id"]}, exc.refused, keyed) from None
            raise ToolFailure(
                ToolStatus.TIMEOUT,
                ErrorCode.TIMEOUT,
                f"the gateway node that holds this task ({node}) did not answer in time; "
                + (
                    "a retry with the same idempotency key says whether the call took effect"
                    if keyed
                    else "the call may still take effect there"
                ),
                retryable=keyed,
            ) from None
        except BusError as exc:
            raise ToolFailure(
                ToolStatus.UNAVAILABLE,
                ErrorCode.UNAVAILABLE,
                f"the gateway's cluster bus is unavailable ({exc}); nothing was done",
                retryable=True,
                details={"retry_after_s": 1},
            ) from None
        if answer.get("refused"):
            raise ToolFailure(
                ToolStatus.UNAVAILABLE,
                ErrorCode.UNAVAILABLE,
                f"node {node} refused the call: {str(answer['refused'])[:200]}; nothing was done",
                retryable=True,
                details={"retry_after_s": 1},
            )
        if answer.get("not_owner"):
            return None
        return ToolResult.model_validate(answer["result"])

    def _answer(
        self, reply: bytes, node: str, id_key: str, envelope_id: str, sent: bytes, wait_s: float
    ) -> dict[str, Any] | None:
        """The reply opened, when it is `node`'s own answer to the envelope `sent`; None for
        any other: one that does not open, from another node (a copy of the envelope sent
        there), or to another envelope."""
        answer = self._verify("reply", reply, wait_s + ROUTE_MARGIN_S)
        if not isinstance(answer, dict) or answer.get("by") != node:
            return None
        if answer.get(id_key) != envelope_id and answer.get("for") != _digest(sent):
            return None
        return answer

    async def _serve_call(self, data: bytes) -> bytes | None:
        call = self._take_envelope("call", data, "call_id")
        if not isinstance(call, dict):
            return call  # the refusal, or nothing for a copy of an envelope taken
        call_id, task_id = call["call_id"], call["task_id"]
        try:
            record = await self.tasks.record(task_id)
        except GatewayError as exc:
            self._forget(call_id)
            return self._reply({"call_id": call_id, "refused": exc.message})
        if task_id not in self._mine or record is None:
            self._forget(call_id)  # nothing ran: the sender may send it again, elsewhere
            return self._reply({"call_id": call_id, "not_owner": True})
        self.routed_in += 1
        result = await self.pipeline.call(
            record.identity,
            call["tool"],
            call["input"],
            door=Door(call["door"]),
            idempotency_key=call["key"],
            call_id=call_id,
            routed=True,
        )
        return self._reply({"call_id": call_id, "result": result.model_dump(mode="json")})

    def _take_envelope(
        self, purpose: str, data: bytes, id_key: str
    ) -> dict[str, Any] | bytes | None:
        """A routed envelope (a call, an errand) opened and taken: sealed by a node of this
        cluster, sent no longer ago than its own wait, addressed to this node, and not seen
        before. Its id is remembered at once, so two copies delivered together run once.
        Otherwise, the sealed refusal to answer with (bytes), which names the envelope by
        its id, or by its digest when it did not open; or None, no answer at all, for a
        copy of an envelope already taken. Such a copy was not sent by its sender (which
        sends an envelope once): an answer to it would take the one answer NATS lets this
        node give to that reply subject, which belongs to the envelope's own result."""

        def refuse(envelope_id: Any, why: str) -> bytes:
            log.warning("cluster: refused a routed %s: %s", purpose, why)
            refusal = {id_key: envelope_id, "refused": why, "for": _digest(data)}
            return self._reply(refusal)

        opened = self._open(purpose, data, ENVELOPE_MAX_AGE_S)
        if opened is None or not isinstance(opened[0], dict):
            return refuse(None, "a bad or stale envelope (do the nodes share keys and clock?)")
        envelope, sealed_at = opened
        envelope_id = envelope.get(id_key)
        wait_s = envelope.get("wait_s")
        if not isinstance(envelope_id, str) or not isinstance(wait_s, int | float):
            return refuse(None, "a malformed envelope")
        # One second more, for the clocks of two machines.
        window_left = sealed_at + float(wait_s) + 1 - time.time()
        if window_left < 0:
            return refuse(envelope_id, "sent too long ago")
        if envelope.get("to") != self.node_id:
            return refuse(envelope_id, "sent to another node")
        if envelope_id in self._seen_calls:
            log.warning("cluster: ignored a copy of a routed %s already taken", purpose)
            return None
        if not self._remember(envelope_id, window_left):
            return refuse(envelope_id, "too many routed calls in flight; retry")
        taken: dict[str, Any] = envelope
        return taken

    def _remember(self, envelope_id: str, window_s: float) -> bool:
        """Remember an envelope until its window closes; False when too many are open."""
        now = time.monotonic()
        seen = self._seen_calls
        # Oldest first: the closed windows at the front go (one still open stops the
        # sweep, so a closed one behind it may stay a while longer; never the other way).
        while seen and next(iter(seen.values())) < now:
            seen.popitem(last=False)
        if len(seen) >= SEEN_CALLS:
            return False
        seen[envelope_id] = now + window_s
        return True

    def _forget(self, envelope_id: str) -> None:
        self._seen_calls.pop(envelope_id, None)

    # -- errands --------------------------------------------------------------------------

    def serve_errand(self, name: str, errand: Errand) -> None:
        self._errands[name] = errand

    async def at_owner(
        self, task_id: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The owner's answer to the errand `name`, when another node owns the task; None
        when it is done here: this node owns the task, or no live node does (the questions
        a freed task's node left are closed with the freeing). It claims nothing: a
        person's answer does not move a task."""
        for _ in range(2):  # a stale belief about the owner costs one more try
            if task_id in self._mine:
                return None
            owner = await self.ledger.owner(task_id)
            if owner is None or owner.revoked or owner.node_id in (None, self.node_id):
                return None
            envelope = {
                "to": owner.node_id,
                "task_id": task_id,
                "errand": name,
                "body": body,
                "id": new_id("errand"),
                "wait_s": ERRAND_WAIT_S,
            }
            answer = await self._send_errand(owner.node_id, envelope)
            if not answer.get("not_owner"):
                if "error" in answer:
                    raise relayed(answer["error"])
                result: dict[str, Any] = answer["answer"]
                return result
        raise ErrandError(
            "the task is changing gateway nodes; nothing was done",
            code=ErrorCode.UNAVAILABLE,
            http_status=503,
            retryable=True,
            details={"retry_after_s": 1},
        )

    async def _send_errand(self, node: str, envelope: dict[str, Any]) -> dict[str, Any]:
        sent = self._seal("errand", envelope)

        def accept(reply: bytes) -> dict[str, Any] | None:
            return self._answer(reply, node, "id", envelope["id"], sent, ERRAND_WAIT_S)

        try:
            answer = await self.bus.request(ERRANDS.format(node=node), sent, ERRAND_WAIT_S, accept)
        except NoResponder:
            # A dead owner's questions died with it; the node that frees its tasks closes
            # them, which asking again then says.
            raise ErrandError(
                f"the gateway node that holds this task ({node}) is not answering; another "
                "takes the task over within a few seconds",
                code=ErrorCode.UNAVAILABLE,
                http_status=503,
                retryable=True,
                details={"retry_after_s": math.ceil(self.beat_s * (MISSED_BEATS + 1))},
            ) from None
        except BusTimeout as exc:
            if exc.refused:
                raise _in_doubt(node, {"errand_id": envelope["id"]}, exc.refused, False) from None
            raise ErrandError(
                f"the gateway node that holds this task ({node}) did not answer in time; it "
                "may have done it: read the task's state before asking again",
                code=ErrorCode.TIMEOUT,
                http_status=504,
            ) from None
        except BusError as exc:
            raise ErrandError(
                f"the gateway's cluster bus is unavailable ({exc}); nothing was done",
                code=ErrorCode.UNAVAILABLE,
                http_status=503,
                retryable=True,
                details={"retry_after_s": 1},
            ) from None
        if answer.get("refused"):
            raise ErrandError(
                f"node {node} refused the errand: {str(answer['refused'])[:200]}; nothing was done",
                code=ErrorCode.UNAVAILABLE,
                http_status=503,
                retryable=True,
            )
        return answer

    async def _serve_errand(self, data: bytes) -> bytes | None:
        envelope = self._take_envelope("errand", data, "id")
        if not isinstance(envelope, dict):
            return envelope  # the refusal, or nothing for a copy of an envelope taken
        errand_id, name = envelope["id"], envelope.get("errand")
        errand = self._errands.get(name) if isinstance(name, str) else None
        try:
            if errand is None:
                raise ErrandError(
                    f"node {self.node_id} does no errand {str(name)[:64]!r}",
                    code=ErrorCode.HANDLER_ERROR,
                    http_status=500,
                )
            record = await self.tasks.record(envelope["task_id"])
            if envelope["task_id"] not in self._mine or record is None:
                self._forget(errand_id)  # nothing was done: the sender may send it again
                return self._reply({"id": errand_id, "not_owner": True})
            answer = await errand(record.identity, envelope["body"])
        except GatewayError as exc:
            error = {**exc.to_json()["error"], "http_status": exc.http_status}
            return self._reply({"id": errand_id, "error": error})
        except Exception:
            log.exception("cluster: the errand %s failed", str(name)[:64])
            error = {
                "code": ErrorCode.HANDLER_ERROR,
                "message": f"the errand failed on node {self.node_id}",
                "retryable": False,
                "http_status": 500,
            }
            return self._reply({"id": errand_id, "error": error})
        return self._reply({"id": errand_id, "answer": answer})

    # -- owners ---------------------------------------------------------------------------

    async def _own(self, task_id: str, owner: Owner) -> None:
        if self._newest.get(task_id, 0) > owner.epoch:
            return  # a newer owner was heard of meanwhile: this claim is already past
        self._note_epoch(task_id, owner.epoch)
        self._mine[task_id] = owner.epoch
        self._others.pop(task_id, None)
        if owner.browser_lost:
            self._browser_moved[task_id] = (
                "the task's browser context was on another gateway node, which no longer "
                "holds the task; it is lost, and the next call gets a new one"
            )
        await self._tell_owner(task_id, self.node_id, owner.epoch)

    def _note_epoch(self, task_id: str, epoch: int) -> None:
        if epoch > self._newest.get(task_id, 0):
            self._newest[task_id] = epoch
            self._newest.move_to_end(task_id)
            while len(self._newest) > NEWEST_EPOCHS:
                self._newest.popitem(last=False)

    async def _lose(self, task_id: str) -> None:
        if self._mine.pop(task_id, None) is None:
            return
        await self.pipeline.forget(task_id, "moved")
        await self.pipeline.release(task_id)
        results = await asyncio.gather(
            *(listener(task_id) for listener in self._release), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("cluster: letting go of %s failed: %r", task_id, result)

    async def _tell_owner(self, task_id: str, node: str | None, epoch: int) -> None:
        message = {"task_id": task_id, "node_id": node, "epoch": epoch}
        with contextlib.suppress(BusError):
            await self.bus.publish(OWNER, self._seal("message", message))

    async def _heard_owner(self, data: bytes) -> None:
        message = self._verify("message", data, ENVELOPE_MAX_AGE_S)
        if message is None:
            return None
        task_id, node, epoch = message["task_id"], message["node_id"], int(message["epoch"])
        if node == self.node_id:
            return None
        self._note_epoch(task_id, epoch)
        if node is not None:
            self._others[task_id] = (Owner(node, epoch, False), time.monotonic())
        else:
            self._others.pop(task_id, None)
        mine = self._mine.get(task_id)
        if mine is not None and epoch > mine:
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
            # given to others. Join again first, as a new incarnation (a tab that comes
            # back meanwhile is taken under it), then let go of what it held before.
            log.warning("cluster: this node was declared dead; joining again")
            held = dict(self._mine)
            await self._tell_freed(await self.ledger.rejoin())
            for task_id, epoch in held.items():
                if self._mine.get(task_id) == epoch:
                    await self._lose(task_id)
        for node, tasks in (await self.ledger.reap(self.beat_s * MISSED_BEATS)).items():
            log.warning("cluster: node %s missed its beats; %d tasks freed", node, len(tasks))
            await self._tell_freed(tasks)

    async def _tell_freed(self, freed: list[Freed]) -> None:
        for task in freed:
            await self._tell_owner(task.task_id, None, task.epoch)

    # -- task ends ------------------------------------------------------------------------

    async def _announce_end(self, task_id: str, reason: str) -> None:
        self._mine.pop(task_id, None)
        self._others.pop(task_id, None)
        if task_id in self._heard:
            return
        message = {"task_id": task_id, "reason": reason, "at": time.time()}
        with contextlib.suppress(BusError):
            await self.bus.publish(ENDED, self._seal("message", message))

    async def _heard_end(self, data: bytes) -> None:
        message = self._verify("message", data, ENVELOPE_MAX_AGE_S)
        if message is not None:
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
                since = await self.ledger.now() - ENDS_LOOKBACK_S
                for ended in await self.ledger.ended_since(since):
                    await self._ended_elsewhere(ended.task_id, ended.revoked_at, ended.reason)
            except GatewayError as exc:
                log.warning("cluster: reading task ends failed: %s", exc)


def sealer(keys: list[str], purpose: str) -> Sealer:
    """What seals and opens one kind of message between the nodes: the gateway's keys,
    newest first (it seals; every key opens, the rotation task tokens have)."""
    return Sealer(keys, purpose)


def _digest(envelope: bytes) -> str:
    """How a refusal names an envelope it could not open (so only its sender takes it)."""
    return hashlib.sha256(envelope).hexdigest()[:32]


def _in_doubt(node: str, envelope: dict[str, str], refused: int, keyed: bool) -> InDoubt:
    return InDoubt(
        f"gateway node {node} was sent this, and no answer from it could be verified before "
        f"the deadline ({refused} replies were not its own: forged, or the nodes do not "
        "share their keys); it may or may not have taken effect there, and it is not sent "
        "again" + ("; a call with the same idempotency key says what it did" if keyed else ""),
        details={"node_id": node, **envelope},
    )


class ErrandError(GatewayError):
    """An errand that failed: on the owner (relayed as it was raised there) or on its way."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        http_status: int,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable, details=details)
        self.http_status = http_status


def relayed(error: Any) -> ErrandError:
    """The error another node answered with, raised here as it was raised there (only what
    an error may be: a status of 400 to 599, else 502)."""
    error = error if isinstance(error, dict) else {}
    status = error.get("http_status")
    details = error.get("details")
    code = error.get("code")
    return ErrandError(
        str(error.get("message", "another gateway node failed")),
        code=code if isinstance(code, str) else ErrorCode.HANDLER_ERROR,
        http_status=status if isinstance(status, int) and 400 <= status <= 599 else 502,
        retryable=error.get("retryable") is True,
        details=details if isinstance(details, dict) else None,
    )


def _not_here() -> ToolFailure:
    return ToolFailure(
        ToolStatus.UNAVAILABLE,
        ErrorCode.UNAVAILABLE,
        "this gateway node no longer holds the task; retry, and the call goes to the node "
        "that does; nothing was done",
        retryable=True,
        details={"retry_after_s": 1},
    )
