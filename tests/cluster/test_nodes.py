"""Two gateway nodes in one process, on a real PostgreSQL and a real NATS server: calls go to
the task's owner and leave their evidence once, a tab that comes to a node takes the task,
ends reach every node, a side effect from an old epoch is not accepted, and a key whose
call died with its node is `in_doubt`, never run again. The NATS server lets in the two
nodes' users and a `tap`, a user allowed everything, which the attacker-side tests use to
read and answer what a node's own credentials may not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import func, select
from starlette.applications import Starlette

from gateway.app import build_app, build_gateway
from gateway.cluster import node as node_module
from gateway.cluster.bus import BusTimeout
from gateway.cluster.node import ClusterNode, ErrandError
from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.errors import InvalidInput, TokenRevoked
from gateway.core.identity import Actor, Sandbox, TaskIdentity
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.core.sandbox_spec import Provision
from gateway.core.store import schema
from gateway.core.tasks.service import TaskCreate
from gateway.core.tokens import Purpose, new_key
from gateway.http.approvals import routes as approval_routes
from gateway.runtime import Gateway
from gateway.sandbox.extension import install as install_sandboxes
from gateway.settings import Settings
from gateway.testing import test_settings
from gateway.testing.waiting import until, until_true
from tests.core_fixtures import new_task
from tests.servers.nats import NatsServer, NatsUser, nats_server, node_user
from tests.servers.postgres import Cluster


class Note(BaseModel):
    text: str = ""


class Ran:
    """Which node ran each call of the test tools, and a gate a slow call waits at."""

    def __init__(self) -> None:
        self.by: list[str] = []
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()


def tools(node: str, ran: Ran) -> list[Tool]:
    async def where(_ctx: ToolContext, args: Note) -> dict[str, Any]:
        ran.by.append(node)
        return {"node": node, "text": args.text}

    async def write(_ctx: ToolContext, _args: Note) -> dict[str, Any]:
        ran.by.append(node)
        return {"node": node}

    async def slow_write(_ctx: ToolContext, _args: Note) -> dict[str, Any]:
        ran.by.append(node)
        ran.entered.set()
        await ran.gate.wait()
        return {"node": node}

    return [
        Tool(
            name="test.where",
            title="Where",
            description="where it ran",
            input_model=Note,
            handler=where,
        ),
        Tool(
            name="test.write",
            title="Write",
            description="a side effect",
            input_model=Note,
            handler=write,
            side_effects=True,
        ),
        Tool(
            name="test.slow_write",
            title="Slow write",
            description="a side effect that waits",
            input_model=Note,
            handler=slow_write,
            side_effects=True,
        ),
    ]


TAP = NatsUser("tap", "tap-password-0123456789")


@pytest.fixture(scope="module")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    users = [node_user("node-a"), node_user("node-b"), TAP]
    with nats_server(tmp_path_factory.mktemp("nats") / "nats.log", users=users) as server:
        yield server


@pytest.fixture
def shared(postgres: Cluster, nats: NatsServer) -> dict[str, Any]:
    """What every node of one cluster shares: the database, the bus and the keys."""
    return {
        "database_url": postgres.new_database(),
        "nats_url": nats.url,
        "secret_keys": [new_key()],
        "control_key": new_key(),
        "cluster_beat_s": 0.2,
    }


def node_settings(tmp_path: Path, name: str, shared: dict[str, Any], nats: NatsServer) -> Settings:
    password = nats.users[name].password
    return test_settings(tmp_path / name, node_id=name, nats_password=password, **shared)


class Nodes:
    def __init__(self, tmp_path: Path, shared: dict[str, Any], nats: NatsServer) -> None:
        self.tmp_path = tmp_path
        self.shared = shared
        self.nats = nats
        self.gateways: dict[str, Gateway] = {}
        self.apps: dict[str, Starlette] = {}
        self.ran = Ran()

    def http(self, name: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.apps[name])
        return httpx.AsyncClient(
            transport=transport,
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {self.shared['control_key']}"},
        )

    async def start(self, name: str) -> Gateway:
        gw = build_gateway(node_settings(self.tmp_path, name, self.shared, self.nats))
        # The node's HTTP door for approvals, served in process (the gateway is started
        # here, not by the app's lifespan).
        self.apps[name] = build_app(gateway=gw, extensions=[approval_routes])
        for tool in tools(name, self.ran):
            gw.registry.add(tool)
        await gw.start()
        self.gateways[name] = gw
        return gw

    async def stop(self, name: str) -> None:
        await self.gateways.pop(name).stop()

    async def close(self) -> None:
        for name in list(self.gateways):
            await self.stop(name)


def node_of(gw: Gateway) -> ClusterNode:
    node = gw.placement
    assert isinstance(node, ClusterNode)
    return node


@pytest.fixture
async def nodes(tmp_path: Path, shared: dict[str, Any], nats: NatsServer) -> AsyncIterator[Nodes]:
    cluster = Nodes(tmp_path, shared, nats)
    try:
        yield cluster
    finally:
        await cluster.close()


def sign(value: dict[str, Any], key: str, purpose: str, at: float | None = None) -> bytes:
    """An envelope as a node seals one (with `key`, which may not be the cluster's)."""
    return node_module.sealer([key], purpose).seal(value, at)


async def request(gw: Gateway, subject: str, data: bytes, shared: dict[str, Any]) -> dict[str, Any]:
    """Send `data` on the bus as a node's client may; the node's sealed reply, opened."""
    reply = await node_of(gw).bus.request(subject, data, 10, lambda reply: reply)
    answer: dict[str, Any] = node_module.sealer(shared["secret_keys"], "reply").open(reply)[0]
    return answer


async def unanswered(gw: Gateway, subject: str, data: bytes) -> bool:
    """Whether `data` sent on the bus gets no answer at all (within a second)."""
    try:
        await node_of(gw).bus.request(subject, data, 1, lambda reply: reply)
    except BusTimeout:
        return True
    return False


def routed_call(identity: TaskIdentity, call_id: str, tool: str = "test.where") -> dict[str, Any]:
    """The envelope a node sends node-a for a call of `identity`'s task."""
    return {
        "to": "node-a",
        "task_id": identity.task_id,
        "tool": tool,
        "input": {},
        "door": "mcp",
        "key": None,
        "call_id": call_id,
        "wait_s": 30,
    }


async def evidence_count(gw: Gateway, task_id: str) -> int:
    ev = schema.evidence
    query = select(func.count()).where(ev.c.task_id == task_id, ev.c.kind == "call")
    async with gw.store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def test_a_call_runs_on_the_owner_and_is_recorded_once(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)  # its tab came to node a

    result = await b.calls.call(identity, "test.where", {"text": "hi"}, door=Door.MCP)

    assert result.status is ToolStatus.SUCCEEDED, result
    assert result.output == {"node": "node-a", "text": "hi"}
    assert nodes.ran.by == ["node-a"]
    assert await evidence_count(a, identity.task_id) == 1
    assert node_of(b).routed_out == 1
    assert node_of(a).routed_in == 1


async def test_a_task_nobody_owns_is_taken_by_the_node_its_call_reaches(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)

    first = await b.calls.call(identity, "test.where", {}, door=Door.MCP)
    second = await a.calls.call(identity, "test.where", {}, door=Door.MCP)

    assert first.output["node"] == second.output["node"] == "node-b"
    assert node_of(b).owned() == {identity.task_id: 1}
    assert await evidence_count(a, identity.task_id) == 2


async def test_a_tab_taking_the_task_moves_its_calls(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    released: list[str] = []

    async def let_go(task_id: str) -> None:
        released.append(task_id)

    node_of(a).on_release(let_go)
    await node_of(b).take(identity.task_id)  # the tab reconnected to node b
    await until(lambda: released == [identity.task_id], "the other node heard")

    result = await a.calls.call(identity, "test.where", {}, door=Door.MCP)
    assert result.output["node"] == "node-b"
    assert node_of(b).owned() == {identity.task_id: 2}
    assert node_of(a).owned() == {}


async def test_an_end_on_one_node_is_refused_on_every_node(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, tokens = await new_task(a)
    await node_of(a).take(identity.task_id)
    assert (await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)).task_id == identity.task_id
    ended: list[str] = []

    async def heard(task_id: str, _reason: str) -> None:
        ended.append(task_id)

    a.tasks.on_end(heard)
    await b.tasks.end(identity.task_id)

    await until(lambda: ended == [identity.task_id], "the other node heard")
    with pytest.raises(TokenRevoked):
        await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)
    result = await b.calls.call(identity, "test.write", {}, door=Door.MCP)
    assert (result.status, result.error and result.error.code) == (
        ToolStatus.DENIED,
        ErrorCode.REVOKED,
    )
    assert nodes.ran.by == []


async def test_an_end_with_its_message_lost_is_read_from_the_store(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, tokens = await new_task(a)
    await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)  # known (cached) on node a
    # Node b ends it in the ledger only, as if its message never left.
    await node_of(b).ledger.revoke(identity.task_id, time.time(), "ended")

    await until(lambda: identity.task_id in a.tasks.ended_ids(), "the other node heard")
    with pytest.raises(TokenRevoked):
        await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)


async def test_a_side_effect_of_an_old_epoch_is_not_accepted(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    call = asyncio.create_task(
        a.calls.call(identity, "test.slow_write", {}, door=Door.MCP, idempotency_key="order-1")
    )
    await nodes.ran.entered.wait()  # under way on node a, epoch 1
    await node_of(b).take(identity.task_id)  # node b holds it now, epoch 2
    nodes.ran.gate.set()

    late = await call
    assert late.status is ToolStatus.UNAVAILABLE
    assert late.error is not None and late.error.code == ErrorCode.IN_DOUBT
    # Not accepted as the call's result: kept as in doubt, under no idempotency key.
    [record] = await a.store.evidence_for(identity.org_id, identity.task_id)
    assert record["status"] == "unavailable" and record["error"]["code"] == "in_doubt"
    assert record["owner"] == {"node_id": "node-a", "epoch": 1, "lost": True}
    assert await a.store.idempotent_result(identity.task_id, "test.slow_write", "order-1") is None

    retry = await b.calls.call(
        identity, "test.slow_write", {}, door=Door.MCP, idempotency_key="order-1"
    )
    assert retry.error is not None and retry.error.code == ErrorCode.IN_DOUBT, retry
    assert retry.error.details is not None and retry.error.details["node_id"] == "node-a"
    assert nodes.ran.by == ["node-a"]  # never run again


async def test_a_dead_owner_is_answered_at_once_then_its_task_is_freed(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    # Node a vanishes as a killed process would: off the bus, no more beats, no goodbye.
    for loop in node_of(a)._loops:
        loop.cancel()
    await node_of(a).bus.close()

    gone = await b.calls.call(identity, "test.where", {}, door=Door.MCP)
    assert (gone.status, gone.error and gone.error.code) == (
        ToolStatus.UNAVAILABLE,
        ErrorCode.UNAVAILABLE,
    )
    assert gone.error is not None and gone.error.retryable

    async def answered_by_b() -> bool:
        result = await b.calls.call(identity, "test.where", {}, door=Door.MCP)
        return result.status is ToolStatus.SUCCEEDED and result.output["node"] == "node-b"

    await until_true(answered_by_b, "the call was answered there")
    assert nodes.ran.by[-1] == "node-b"


async def test_routed_calls_that_are_forged_misdirected_or_replayed_run_nothing(
    nodes: Nodes, shared: dict[str, Any]
) -> None:
    a = await nodes.start("node-a")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    call = routed_call(identity, "call_forged1", "test.write")

    def signed(value: dict[str, Any], key: str) -> bytes:
        return sign(value, key, "call")

    async def send(data: bytes) -> dict[str, Any]:
        return await request(a, "gw.call.node-a", data, shared)

    # Signed with a key that is not the cluster's, or not signed at all.
    assert "refused" in await send(signed(call, new_key()))
    assert "refused" in await send(json.dumps(call).encode())
    # Signed right, but for another node.
    assert "refused" in await send(signed({**call, "to": "node-b"}, shared["secret_keys"][0]))
    assert nodes.ran.by == []
    # The one genuine envelope runs once; the same envelope again runs nothing, and gets
    # no answer (the one answer to its reply subject is its result's).
    genuine = signed(call, shared["secret_keys"][0])
    assert (await send(genuine))["result"]["status"] == "succeeded"
    assert await unanswered(a, "gw.call.node-a", genuine)
    assert nodes.ran.by == ["node-a"]


async def test_a_routed_call_whose_answer_comes_late_is_not_run_twice(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    # Node b stops waiting for node a's answer before node a is done.
    monkeypatch.setattr(node_module, "ROUTE_MARGIN_S", -29.8)
    call = asyncio.create_task(
        b.calls.call(identity, "test.slow_write", {}, door=Door.MCP, idempotency_key="k-1")
    )
    await nodes.ran.entered.wait()
    first = await call
    assert first.status is ToolStatus.TIMEOUT and first.error is not None
    assert first.error.retryable  # keyed: a retry says whether it took effect
    nodes.ran.gate.set()

    # The owner's record and key are stored; node b's own record is under an id of its own.
    async def stored() -> bool:
        done = await a.store.idempotent_result(identity.task_id, "test.slow_write", "k-1")
        return done is not None

    await until_true(stored, "the call was answered there")
    monkeypatch.setattr(node_module, "ROUTE_MARGIN_S", 5.0)
    retry = await b.calls.call(
        identity, "test.slow_write", {}, door=Door.MCP, idempotency_key="k-1"
    )
    assert retry.status is ToolStatus.SUCCEEDED and retry.replayed
    assert nodes.ran.by == ["node-a"]
    records = await a.store.evidence_for(identity.org_id, identity.task_id)
    assert sorted((r["status"], bool(r.get("routed"))) for r in records) == [
        ("succeeded", False),
        ("succeeded", False),
        ("timeout", True),
    ]


async def test_a_freed_message_does_not_drop_a_newer_claim(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    epoch = node_of(a).owned()[identity.task_id]
    # A late "freed" message about an older epoch, as from a reaper that ran before.
    await node_of(a)._heard_owner(
        node_of(a)._seal(
            "message", {"task_id": identity.task_id, "node_id": None, "epoch": epoch - 1}
        )
    )
    assert node_of(a).owned() == {identity.task_id: epoch}
    # An unsigned one about a newer epoch is ignored altogether.
    forged = {"task_id": identity.task_id, "node_id": "node-x", "epoch": epoch + 5}
    await node_of(a)._heard_owner(json.dumps(forged).encode())
    assert node_of(a).owned() == {identity.task_id: epoch}


async def test_an_unsigned_end_message_ends_nothing(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    identity, tokens = await new_task(a)
    await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)
    message = {"task_id": identity.task_id, "reason": "forged", "at": time.time()}
    await node_of(a).bus.publish("gw.ended", json.dumps(message).encode())
    await asyncio.sleep(1.2)  # past two reads of the ends, which find none
    assert (await a.tasks.authenticate(tokens["agent"], Purpose.AGENT)).task_id


async def test_a_task_taken_from_a_node_with_its_browser_says_so_once(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    other, _ = await new_task(a)
    for task_id in (identity.task_id, other.task_id):
        await node_of(a).take(task_id)
    await node_of(a).browser_opened(identity.task_id)  # only the first had a browser on a

    for task_id in (identity.task_id, other.task_id):
        await node_of(b).take(task_id)

    told = node_of(b).browser_moved(identity.task_id)
    assert told is not None and "lost" in told
    assert node_of(b).browser_moved(identity.task_id) is None  # once
    assert node_of(b).browser_moved(other.task_id) is None  # it had none to lose


async def test_a_node_of_a_cluster_provisions_no_sandbox(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    install_sandboxes(a)
    request = TaskCreate(
        actor=Actor(id="user_1", role="admin"),
        org_id="org_a",
        sandbox=Sandbox(id="sb", provision=Provision(repository="example", commit="0" * 40)),
    )
    with pytest.raises(InvalidInput, match="cluster"):
        await a.tasks.create(request)
    assert a.tasks.live_ids() == []


DECISION = {"decision": "approve", "approver": {"id": "admin_1", "role": "admin"}}


async def asking(gw: Gateway, identity: TaskIdentity) -> tuple[asyncio.Future[Any], str]:
    """A side-effect call on `gw` that waits for a person's answer, and its approval."""
    call = asyncio.ensure_future(gw.calls.call(identity, "test.write", {}, door=Door.MCP))
    await until(lambda: bool(gw.approvals.pending(identity.task_id)), "the call asked")
    return call, gw.approvals.pending(identity.task_id)[0].id


async def test_a_decision_sent_to_any_node_reaches_the_owner_that_waits(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    policy = ApprovalPolicy(required=("test.write",))
    identity, _ = await new_task(a, approvals=policy)
    other, _ = await new_task(a, approvals=policy)
    await node_of(a).take(identity.task_id)
    call, approval_id = await asking(a, identity)
    # A node that starts while a question waits on another leaves it pending.
    b = await nodes.start("node-b")
    url = f"/v1/tasks/{identity.task_id}/approvals"

    async with nodes.http("node-b") as http:
        listed = (await http.get(url)).json()["approvals"]
        assert [(x["approval_id"], x["status"]) for x in listed] == [(approval_id, "pending")]
        unknown = await http.post(f"{url}/apr_unknown", json=DECISION)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
        # Another task's route does not reach this task's question.
        await node_of(a).take(other.task_id)
        crossed = await http.post(
            f"/v1/tasks/{other.task_id}/approvals/{approval_id}", json=DECISION
        )
        assert (crossed.status_code, crossed.json()["error"]["code"]) == (404, "not_found")

        answer = await http.post(f"{url}/{approval_id}", json=DECISION)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "approved"
        assert answer.json()["decision"]["approver"]["id"] == "admin_1"
        result = await asyncio.wait_for(call, 10)
        assert (result.status, result.output) == (ToolStatus.SUCCEEDED, {"node": "node-a"})

        again = await http.post(f"{url}/{approval_id}", json=DECISION)
        assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")
    # The answer moved nothing: the task stays with the node that waited on it.
    assert node_of(b).owned() == {}
    assert node_of(a).owned()[identity.task_id] == 1


async def test_an_errand_that_is_forged_or_replayed_decides_nothing(
    nodes: Nodes, shared: dict[str, Any]
) -> None:
    a = await nodes.start("node-a")
    identity, _ = await new_task(a, approvals=ApprovalPolicy(required=("test.write",)))
    await node_of(a).take(identity.task_id)
    call, approval_id = await asking(a, identity)
    errand: dict[str, Any] = {
        "to": "node-a",
        "task_id": identity.task_id,
        "errand": "approval.decide",
        "body": {"approval_id": approval_id, "answer": DECISION},
        "id": "errand_forged1",
        "wait_s": 10,
    }

    def signed(value: dict[str, Any], key: str) -> bytes:
        return sign(value, key, "errand")

    async def send(data: bytes) -> dict[str, Any]:
        return await request(a, "gw.errand.node-a", data, shared)

    # Signed with a key that is not the cluster's, not signed, signed as a call, or for
    # another node: refused, and the call still waits.
    assert "refused" in await send(signed(errand, new_key()))
    assert "refused" in await send(json.dumps(errand).encode())
    assert "refused" in await send(sign(errand, shared["secret_keys"][0], "call"))
    assert "refused" in await send(signed({**errand, "to": "node-b"}, shared["secret_keys"][0]))
    assert [r.status for r in a.approvals.pending(identity.task_id)] == ["pending"]
    # The genuine one decides; the same envelope again decides nothing and gets no answer.
    genuine = signed(errand, shared["secret_keys"][0])
    assert (await send(genuine))["answer"]["status"] == "approved"
    assert await unanswered(a, "gw.errand.node-a", genuine)
    assert (await asyncio.wait_for(call, 10)).status is ToolStatus.SUCCEEDED


async def test_a_decision_for_a_dead_owner_is_a_retryable_503_then_closed(nodes: Nodes) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a, approvals=ApprovalPolicy(required=("test.write",)))
    await node_of(a).take(identity.task_id)
    call, approval_id = await asking(a, identity)
    for loop in node_of(a)._loops:  # node a vanishes as a killed process would
        loop.cancel()
    await node_of(a).bus.close()

    async with nodes.http("node-b") as http:
        answer = await http.post(
            f"/v1/tasks/{identity.task_id}/approvals/{approval_id}", json=DECISION
        )
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["retryable"]) == ("unavailable", True)
    assert "node-a" in error["message"]

    # Once node b frees the dead node's tasks, the question is closed with them.
    async def freed() -> bool:
        owner = await node_of(b).ledger.owner(identity.task_id)
        return owner is not None and owner.node_id is None

    await until_true(freed, "node b freed the dead node's task")
    listed = await b.approvals.listing(identity.task_id)
    assert [x["status"] for x in listed] == ["cancelled"]
    assert not call.done()  # closed by the freeing, not by its call ending
    call.cancel()
    async with nodes.http("node-b") as http:
        again = await http.post(
            f"/v1/tasks/{identity.task_id}/approvals/{approval_id}", json=DECISION
        )
    assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict"), again.text


async def test_an_errand_that_fails_on_the_owner_is_answered_at_once_and_not_retried(
    nodes: Nodes,
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)

    async def broken(_identity: TaskIdentity, _body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("a bug on the owner")

    node_of(a).serve_errand("test.broken", broken)
    for name in ("test.broken", "test.unknown"):
        started = time.monotonic()
        with pytest.raises(ErrandError) as failed:
            await node_of(b).at_owner(identity.task_id, name, {})
        assert time.monotonic() - started < node_module.ERRAND_WAIT_S / 2  # no timeout
        assert (failed.value.http_status, failed.value.code) == (500, "handler_error")
        assert not failed.value.retryable
        assert "a bug" not in failed.value.message  # the owner's insides stay there


async def test_a_node_whose_clock_runs_a_little_ahead_is_heard(
    nodes: Nodes, shared: dict[str, Any]
) -> None:
    a = await nodes.start("node-a")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    key = shared["secret_keys"][0]

    def signed_ahead(value: dict[str, Any], seconds: int) -> bytes:
        return sign(value, key, "call", at=time.time() + seconds)

    # Sealed by a node whose clock is 1 s ahead: a time node a has not reached; and by one
    # 30 s ahead, which no clock kept in time is.
    ahead = signed_ahead(routed_call(identity, "call_ahead1"), 1)
    far_ahead = signed_ahead(routed_call(identity, "call_ahead2"), 30)

    assert (await request(a, "gw.call.node-a", ahead, shared))["result"]["status"] == "succeeded"
    assert "refused" in await request(a, "gw.call.node-a", far_ahead, shared)
    assert nodes.ran.by == ["node-a"]


async def test_no_envelope_is_forgotten_while_its_window_is_open(
    nodes: Nodes, shared: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_module, "SEEN_CALLS", 2)
    a = await nodes.start("node-a")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    key, subject = shared["secret_keys"][0], "gw.call.node-a"
    first, second, third = (
        sign(routed_call(identity, f"call_window{n}"), key, "call") for n in range(3)
    )

    for envelope in (first, second):
        answer = await request(a, subject, envelope, shared)
        assert answer["result"]["status"] == "succeeded"
    # Full of open windows: a new one is refused (it may be sent again), and the oldest is
    # still remembered, so its replay runs nothing (and is not answered).
    assert "too many" in (await request(a, subject, third, shared))["refused"]
    assert await unanswered(a, subject, first)
    assert nodes.ran.by == ["node-a", "node-a"]


async def test_an_errand_the_owner_does_not_answer_in_time_may_have_been_done(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_module, "ERRAND_WAIT_S", 0.5)
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    done = asyncio.Event()

    async def slow(_identity: TaskIdentity, _body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(1.0)
        done.set()
        return {"done": True}

    node_of(a).serve_errand("test.slow", slow)
    with pytest.raises(ErrandError) as failed:
        await node_of(b).at_owner(identity.task_id, "test.slow", {})
    assert (failed.value.http_status, failed.value.code) == (504, "timeout")
    assert not failed.value.retryable  # asking again could do it twice
    assert "may have done it" in failed.value.message
    await asyncio.wait_for(done.wait(), 5)  # and the owner did
