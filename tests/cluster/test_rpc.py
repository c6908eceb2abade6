"""The protocol between nodes over a loopback bus (the layer below it, faked here; the real
one is NATS in test_nodes.py): a routed call and an errand are served alike, and every
failure on the way is told to the sender as the same leaf of the error tree for both."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

from gateway.cluster.bus import Accept, BusError, BusTimeout, Handler, NoResponder
from gateway.cluster.envelope import Envelopes
from gateway.cluster.rpc import (
    CALL,
    ERRAND,
    ErrandError,
    Job,
    Kind,
    NodeTimeout,
    NodeUnavailable,
    Rpc,
)
from gateway.core.errors import InDoubt, NotFound
from gateway.core.identity import TaskIdentity
from gateway.core.results import ErrorCode, ToolStatus
from gateway.core.tokens import new_key
from tests.core_fixtures import identity

T = TypeVar("T")
KEYS = [new_key()]


class Loopback:
    """Delivers a request to the handler subscribed to its subject, in process; `down`
    makes it fail as a bus that cannot send, `forger` answers first with junk."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.down = False
        self.forger = False

    async def request(self, subject: str, data: bytes, timeout_s: float, accept: Accept[T]) -> T:
        if self.down:
            raise BusError("down")
        handler = self.handlers.get(subject)
        if handler is None:
            raise NoResponder(subject)
        refused = 0
        if self.forger:
            refused += 1 if accept(b"junk") is None else 0
        reply = await handler(data)
        value = accept(reply) if reply is not None else None
        if value is None:
            raise BusTimeout(subject, refused + (reply is not None))
        return value

    async def publish(self, subject: str, data: bytes) -> None:
        return None

    async def subscribe(self, subject: str, handler: Handler) -> None:
        self.handlers[subject] = handler

    async def close(self) -> None:
        return None


IDENTITY = identity(task_id="task_1")


class Owner:
    """Node a, holding task_1 (or not), with what it does for each kind."""

    def __init__(self, bus: Loopback) -> None:
        self.rpc = Rpc(Envelopes("node-a", KEYS, remember=10), bus, gone_retry_s=4)
        self.holds = True
        self.job: Job | None = None

    async def holder(self, task_id: str) -> TaskIdentity | None:
        return IDENTITY if self.holds and task_id == "task_1" else None

    def job_for(self, envelope: dict[str, Any]) -> Job:
        async def echo(identity: TaskIdentity) -> dict[str, Any]:
            return {"task": identity.task_id, "id": envelope.get("call_id", envelope.get("id"))}

        return self.job or echo

    async def serve(self, kind: Kind, data: bytes) -> bytes | None:
        return await self.rpc.serve(kind, data, self.job_for, self.holder)


@pytest.fixture
def bus() -> Loopback:
    return Loopback()


@pytest.fixture
def owner(bus: Loopback) -> Owner:
    owner = Owner(bus)

    def serving(kind: Kind) -> Handler:
        return lambda data: owner.serve(kind, data)

    for kind in (CALL, ERRAND):
        bus.handlers[kind.subject.format(node="node-a")] = serving(kind)
    return owner


def sender(bus: Loopback) -> Rpc:
    return Rpc(Envelopes("node-b", KEYS, remember=10), bus, gone_retry_s=4)


def envelope(kind: Kind, n: int, to: str = "node-a") -> dict[str, Any]:
    return {"to": to, "task_id": "task_1", kind.id_key: f"{kind.name}_{n}", "wait_s": 5}


async def ask(bus: Loopback, kind: Kind, n: int = 1, *, keyed: bool = False, **over: Any) -> Any:
    sent = {**envelope(kind, n), **over}
    return await sender(bus).request(kind, "node-a", sent, reply_age_s=10, keyed=keyed)


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_the_owner_answers_a_call_and_an_errand_alike(
    bus: Loopback, owner: Owner, kind: Kind
) -> None:
    assert await ask(bus, kind) == {"task": "task_1", "id": f"{kind.name}_1"}


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_an_owner_gone_or_a_bus_down_is_unavailable_and_nothing_was_done(
    bus: Loopback, kind: Kind
) -> None:
    with pytest.raises(NodeUnavailable) as gone:
        await ask(bus, kind)  # nobody subscribes on node a's subject
    bus.down = True
    with pytest.raises(NodeUnavailable) as down:
        await ask(bus, kind)

    for failed in (gone.value, down.value):
        assert (failed.http_status, failed.code, failed.tool_status) == (
            503,
            ErrorCode.UNAVAILABLE,
            ToolStatus.UNAVAILABLE,
        )
        assert failed.retryable and "nothing was done" in failed.message
    assert gone.value.details == {"retry_after_s": 4}
    assert "node-a" in gone.value.message


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_an_envelope_refused_by_the_owner_is_unavailable(
    bus: Loopback, owner: Owner, kind: Kind
) -> None:
    with pytest.raises(NodeUnavailable, match=f"refused the {kind.name}: sent to another"):
        await sender(bus).request(kind, "node-a", envelope(kind, 1, to="node-c"), reply_age_s=10)


async def test_no_answer_in_time_may_have_been_done_and_only_a_key_makes_it_retryable(
    bus: Loopback, owner: Owner
) -> None:
    results: list[NodeTimeout] = []
    for kind, keyed in ((CALL, False), (CALL, True), (ERRAND, False)):
        await ask(bus, kind, 1, keyed=keyed)
        with pytest.raises(NodeTimeout) as late:
            await ask(bus, kind, 1, keyed=keyed)  # a copy: the owner answers nothing
        results.append(late.value)
        owner.rpc.envelopes.forget(f"{kind.name}_1")

    assert [(r.http_status, r.code, r.tool_status) for r in results] == [
        (504, ErrorCode.TIMEOUT, ToolStatus.TIMEOUT)
    ] * 3
    assert [r.retryable for r in results] == [False, True, False]
    assert "may still take effect" in results[0].message
    assert "same idempotency key" in results[1].message
    assert "may have done it" in results[2].message
    assert all(isinstance(r, ErrandError) for r in results)


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_only_answers_that_were_not_the_owners_are_in_doubt(
    bus: Loopback, owner: Owner, kind: Kind
) -> None:
    bus.forger = True
    await ask(bus, kind)  # the owner's answer still ends the wait
    with pytest.raises(InDoubt) as doubt:
        await ask(bus, kind)  # a copy: only the junk came
    assert doubt.value.details == {"node_id": "node-a", f"{kind.name}_id": f"{kind.name}_1"}
    assert not doubt.value.retryable and "nothing was done" not in doubt.value.message


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_a_node_that_does_not_hold_the_task_says_so_and_forgets_the_envelope(
    bus: Loopback, owner: Owner, kind: Kind
) -> None:
    owner.holds = False
    assert await ask(bus, kind) is None
    owner.holds = True
    assert await ask(bus, kind) is not None  # the same envelope, sent again, runs


@pytest.mark.parametrize("kind", [CALL, ERRAND])
async def test_what_the_owner_raises_comes_back_as_it_was_raised_and_a_bug_stays_there(
    bus: Loopback, owner: Owner, kind: Kind
) -> None:
    async def missing(_identity: TaskIdentity) -> Any:
        raise NotFound("no such approval")

    async def broken(_identity: TaskIdentity) -> Any:
        raise RuntimeError("a bug on the owner")

    owner.job = missing
    with pytest.raises(ErrandError) as relayed:
        await ask(bus, kind, 1)
    assert (relayed.value.http_status, relayed.value.code) == (404, ErrorCode.NOT_FOUND)
    assert relayed.value.message == "no such approval"

    owner.job = broken
    with pytest.raises(ErrandError) as bug:
        await ask(bus, kind, 2)
    assert (bug.value.http_status, bug.value.code, bug.value.retryable) == (
        500,
        ErrorCode.HANDLER_ERROR,
        False,
    )
    assert "a bug" not in bug.value.message
