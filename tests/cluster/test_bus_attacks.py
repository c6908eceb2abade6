"""The cluster's bus from an attacker's side, on a real NATS server and two gateway nodes.

A local process with no credentials connects to nothing; with one node's credentials it
reads and answers none of another node's calls, and what it may read (the broadcasts, its
own node's replies) is sealed. The `tap` user is allowed everything, standing for a reader
of the bus beyond what any node's user may (a misconfigured server, a copy of its traffic):
it reads no routed call in clear, and its answers, first or not, junk or replayed copies of
genuine ones, neither end a call nor make a node say "nothing was done".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats as nats_client
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gateway.cluster import node as node_module
from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.testing.waiting import until
from tests.cluster.test_nodes import DECISION, TAP, Nodes, asking, nats, node_of, shared
from tests.core_fixtures import new_task
from tests.servers.nats import NatsServer, NatsUser

__all__ = ["nats", "shared"]

# What a call's input carries, to look for in what the bus carried.
MARKER = "routed-input-5d1c"


@pytest.fixture
async def nodes(tmp_path: Path, shared: dict[str, Any], nats: NatsServer) -> AsyncIterator[Nodes]:
    cluster = Nodes(tmp_path, shared, nats)
    try:
        yield cluster
    finally:
        await cluster.close()


class Intruder:
    """The attacker's NATS client, and the errors the server sent it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.client: Client | None = None

    async def connect(self, server: NatsServer, user: NatsUser) -> Client:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        self.client = await nats_client.connect(
            server.url, error_cb=on_error, allow_reconnect=False, **user.credentials
        )
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


@pytest.fixture
async def attacker() -> AsyncIterator[Intruder]:
    client = Intruder()
    try:
        yield client
    finally:
        await client.close()


def in_clear(data: bytes, *secrets: str) -> bool:
    return any(secret.encode() in data for secret in secrets)


async def test_a_client_without_the_right_credentials_connects_to_nothing(
    nats: NatsServer,
) -> None:
    for user, password in ((None, None), ("node-a", "not-its-password")):
        client = Client()
        try:
            with pytest.raises(nats_client.errors.Error, match="Authorization Violation"):
                await client.connect(
                    nats.url,
                    allow_reconnect=False,
                    connect_timeout=5,
                    user=user,
                    password=password,
                )
        finally:
            # The client leaves its refused socket open otherwise.
            await client.close()


async def test_another_nodes_credentials_read_and_answer_nothing_of_a_node(
    nodes: Nodes, nats: NatsServer, attacker: Intruder
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    # A process holding node b's NATS credentials, and not the gateway's keys.
    client = await attacker.connect(nats, nats.users["node-b"])
    taken: dict[str, list[bytes]] = {}

    def keep(subject: str) -> Any:
        async def on_message(msg: Msg) -> None:
            taken.setdefault(subject, []).append(bytes(msg.data))

        return on_message

    refused = ["gw.call.node-a", "gw.errand.node-a", "gw.inbox.node-a.>", ">"]
    allowed = ["gw.inbox.node-b.>", "gw.owner", "gw.ended"]
    for subject in refused + allowed:
        await client.subscribe(subject, cb=keep(subject))
    # Nor may it answer into another node's inbox.
    await client.publish("gw.inbox.node-a.x", b"junk")
    await client.flush()

    result = await b.calls.call(identity, "test.where", {"text": MARKER}, door=Door.MCP)
    await node_of(b).take(identity.task_id)  # an owner broadcast, heard by every node
    await until(lambda: bool(taken.get("gw.owner")), "the broadcast reached the attacker")

    assert (result.status, result.output) == (
        ToolStatus.SUCCEEDED,
        {"node": "node-a", "text": MARKER},
    )
    assert all(subject not in taken for subject in refused), taken.keys()
    violations = [error for error in attacker.errors if "permissions violation" in error]
    assert len(violations) == len(refused) + 1, attacker.errors
    # What it may read is sealed: node b's reply and the broadcast, but neither the input,
    # nor the output, nor even the task's id, in clear.
    read = [data for subject in allowed for data in taken.get(subject, [])]
    assert len(read) >= 2
    assert not [data for data in read if in_clear(data, MARKER, identity.task_id)]


async def test_a_reader_of_the_whole_bus_reads_no_routed_call_in_clear(
    nodes: Nodes, nats: NatsServer, attacker: Intruder
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    client = await attacker.connect(nats, TAP)
    carried: list[tuple[str, bytes]] = []

    async def on_message(msg: Msg) -> None:
        carried.append((msg.subject, bytes(msg.data)))

    await client.subscribe(">", cb=on_message)
    await client.flush()

    result = await b.calls.call(identity, "test.where", {"text": MARKER}, door=Door.MCP)
    assert result.status is ToolStatus.SUCCEEDED
    await until(lambda: len(carried) >= 2, "the call and its answer crossed the bus")
    # The call went out and its answer came back, and neither reads in clear.
    assert {subject.rsplit(".", 1)[0] for subject, _ in carried} >= {"gw.call"}
    assert [s for s, data in carried if in_clear(data, MARKER, identity.task_id)] == []


async def test_forged_answers_neither_end_a_routed_call_nor_repeat_its_side_effect(
    nodes: Nodes, nats: NatsServer, attacker: Intruder
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    client = await attacker.connect(nats, TAP)
    forged = 0

    async def answer_first(msg: Msg) -> None:
        # Junk at once; then the genuine envelope sent to another node, which refuses it
        # as sent to another: a sealed refusal of that very call, not the owner's answer.
        nonlocal forged
        await client.publish(msg.reply, b"junk")
        await client.publish("gw.call.node-b", msg.data, reply=msg.reply)
        forged += 2

    await client.subscribe("gw.call.node-a", cb=answer_first)
    await client.flush()

    results = [await b.calls.call(identity, "test.write", {}, door=Door.MCP) for _ in range(3)]

    assert [(r.status, r.output) for r in results] == [
        (ToolStatus.SUCCEEDED, {"node": "node-a"}),
    ] * 3
    assert forged == 6
    assert nodes.ran.by == ["node-a"] * 3  # once per call, none repeated


async def test_only_unverifiable_answers_by_the_deadline_are_in_doubt(
    nodes: Nodes, nats: NatsServer, attacker: Intruder, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await nodes.start("node-a")
    b = await nodes.start("node-b")
    identity, _ = await new_task(a)
    await node_of(a).take(identity.task_id)
    client = await attacker.connect(nats, TAP)

    async def junk(msg: Msg) -> None:
        await client.publish(msg.reply, b"junk")

    await client.subscribe("gw.call.node-a", cb=junk)
    await client.flush()
    # Node b waits a fraction of a second for the owner, which is still running the call.
    monkeypatch.setattr(node_module, "ROUTE_MARGIN_S", -29.8)
    call = asyncio.create_task(b.calls.call(identity, "test.slow_write", {}, door=Door.MCP))
    await nodes.ran.entered.wait()
    result = await call

    assert result.status is ToolStatus.UNAVAILABLE and result.error is not None
    assert (result.error.code, result.error.retryable) == (ErrorCode.IN_DOUBT, False)
    assert result.error.details is not None and result.error.details["node_id"] == "node-a"
    assert "nothing was done" not in result.error.message
    nodes.ran.gate.set()
    assert nodes.ran.by == ["node-a"]  # it did run there


async def test_a_forged_answer_to_a_persons_decision_is_set_aside(
    nodes: Nodes, nats: NatsServer, attacker: Intruder
) -> None:
    a = await nodes.start("node-a")
    await nodes.start("node-b")
    identity, _ = await new_task(a, approvals=ApprovalPolicy(required=("test.write",)))
    await node_of(a).take(identity.task_id)
    call, approval_id = await asking(a, identity)
    client = await attacker.connect(nats, TAP)

    async def junk(msg: Msg) -> None:
        await client.publish(msg.reply, b"junk")

    await client.subscribe("gw.errand.node-a", cb=junk)
    await client.flush()

    async with nodes.http("node-b") as http:
        answer = await http.post(
            f"/v1/tasks/{identity.task_id}/approvals/{approval_id}", json=DECISION
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "approved"
    assert (await asyncio.wait_for(call, 10)).status is ToolStatus.SUCCEEDED
