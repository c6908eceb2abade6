"""Three `gateway serve` processes on one PostgreSQL, one NATS server, one S3 bucket and
HAProxy in front, used as their users would: a tab on one node, agents on the others, a
task ended anywhere, an owner killed or frozen under load, NATS restarted, and artifacts
read through a node other than the one that wrote them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from gateway.bridge.envelopes import ParentToolResult
from gateway.testing.agents import bridge_client, mcp_call
from gateway.testing.control import ControlPlane, GatewayTask
from gateway.testing.tab_client import ORIGIN, running_tab
from gateway.testing.waiting import until, until_true
from tests.clients.npm import ensure_installed, ts_agent
from tests.servers.cluster import LocalCluster
from tests.servers.postgres import Cluster

pytestmark = pytest.mark.cluster

SCOPES = ("ui", "workspace:read", "workspace:write")


@pytest.fixture(scope="module")
def cluster(postgres: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {"GATEWAY_DASHBOARD_ORIGINS": ORIGIN}
    with LocalCluster(
        3, workdir=tmp_path_factory.mktemp("cluster"), postgres=postgres, env=env
    ) as running:
        yield running


@pytest.fixture
def control(cluster: LocalCluster) -> Iterator[ControlPlane]:
    plane = ControlPlane(cluster.front_url, cluster.control_key)
    try:
        yield plane
    finally:
        plane.close()


@pytest.fixture(autouse=True)
def every_node_back(cluster: LocalCluster) -> Iterator[None]:
    """A test that killed or froze a node leaves the cluster whole for the next one."""
    yield
    for node in cluster.nodes:
        if not node.running:
            cluster.restart(node)
        cluster.wait_in_rotation(node)


def owner_of(cluster: LocalCluster, task_id: str) -> str | None:
    """The node that holds the task, as a node that holds it says."""
    for node in cluster.nodes:
        if not node.running:
            continue
        with httpx.Client(
            base_url=node.url, headers={"authorization": f"Bearer {cluster.control_key}"}
        ) as http:
            try:
                probe = http.get(f"/v1/tasks/{task_id}", timeout=5).json().get("node") or {}
            except httpx.HTTPError:
                continue
        if probe.get("owner") == node.id == probe.get("node_id"):
            return node.id
    return None


def calls_of(control: ControlPlane, task: GatewayTask) -> list[dict[str, Any]]:
    return [r for r in control.evidence(task.task_id) if r["kind"] == "call"]


async def test_a_tab_on_node_1_answers_the_mcp_door_on_node_2_and_the_bridge_on_node_3(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    one, two, three = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    async with running_tab([one.url], task) as tab:
        by_mcp = await mcp_call(two.url, task.agent_token, "ui.read_view", {})
        by_bridge = await bridge_client(three.url, task).call("ui.read_view", {})

    assert by_mcp["status"] == "succeeded", by_mcp
    assert by_bridge.status == "succeeded", by_bridge
    assert [action["type"] for action in tab.actions] == ["read_view", "read_view"]
    assert tab.connections == [one.url]
    calls = calls_of(control, task)
    assert sorted(c["door"] for c in calls) == ["bridge", "mcp"]  # each once, on node 1
    assert owner_of(cluster, task.task_id) == one.id


async def test_the_typescript_sdk_client_is_answered_by_a_nodes_stateless_door(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    # A node's MCP door keeps no session (any node answers any request, in JSON): the
    # official TypeScript client, which opens one with `initialize`, still lists and calls.
    ensure_installed()
    one, two, _ = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    plan = {"url": f"{two.url}/v1/mcp", "token": task.agent_token}
    async with running_tab([one.url], task) as tab:
        listed = await ts_agent({**plan, "scenario": "list"})
        called = await ts_agent({**plan, "scenario": "call", "tool": "ui.read_view"})

    assert "ui_read_view" in listed["names"], listed
    assert called["isError"] is False, called
    assert called["structured"]["status"] == "succeeded", called
    assert [action["type"] for action in tab.actions] == ["read_view"]
    assert [c["door"] for c in calls_of(control, task)] == ["mcp"]


async def test_an_end_on_node_3_closes_the_tab_on_node_1_and_every_node_refuses_it(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    one, _, three = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    async with running_tab([one.url], task) as tab:
        async with httpx.AsyncClient(
            base_url=three.url, headers={"authorization": f"Bearer {cluster.control_key}"}
        ) as http:
            assert (await http.delete(f"/v1/tasks/{task.task_id}")).status_code == 200
        await asyncio.wait_for(tab.ended.wait(), 10)
    assert tab.closes[-1] == 4002  # task ended: final, the tab does not come back

    for node in cluster.nodes:
        answer = await bridge_client(node.url, task).call(
            "workspace.write", {"path": "x", "contents": "y"}
        )
        assert (answer.status, answer.error and answer.error.code) in {
            ("denied", "revoked"),
            ("denied", "invalid_token"),
        }, (node.id, answer)
    assert [c for c in calls_of(control, task) if c["status"] == "succeeded"] == []


async def test_200_ends_under_load_reach_every_node(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    tasks = [control.create_task(scopes=SCOPES, org=f"org_{i % 4}") for i in range(200)]
    nodes = cluster.nodes

    async def statuses() -> list[int]:
        """What each node answers each task's agent token (401: refused)."""

        async def status(node_url: str, task: GatewayTask) -> int:
            async with httpx.AsyncClient(base_url=node_url) as http:
                response = await http.post(
                    "/v1/mcp",
                    headers={"authorization": f"Bearer {task.agent_token}"},
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                )
            return response.status_code

        return list(await asyncio.gather(*(status(n.url, t) for n in nodes for t in tasks)))

    # Every node accepts every token first, and so holds each task as live: from then on
    # a node refuses one only if the end reached it.
    assert 401 not in await statuses()

    async def end(index: int, task: GatewayTask) -> None:
        node = nodes[index % len(nodes)]
        async with httpx.AsyncClient(
            base_url=node.url, headers={"authorization": f"Bearer {cluster.control_key}"}
        ) as http:
            assert (await http.delete(f"/v1/tasks/{task.task_id}")).status_code == 200

    async def load() -> None:
        # Calls of live tasks on every node while the ends go on.
        busy = control.create_task(scopes=SCOPES)
        for i in range(60):
            node = nodes[i % len(nodes)]
            answer = await bridge_client(node.url, busy).call(
                "workspace.write", {"path": f"l/{i}", "contents": "x"}, request_id=f"load-{i}"
            )
            assert answer.status == "succeeded", answer

    await asyncio.gather(load(), *(end(i, t) for i, t in enumerate(tasks)))

    async def all_refused() -> bool:
        return set(await statuses()) == {401}

    await until_true(all_refused, "every node refuses every ended task's token")


async def test_an_owner_killed_under_load_loses_nothing_answered_and_runs_no_key_twice(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    task = control.create_task(scopes=SCOPES)
    async with running_tab([cluster.front_url], task) as tab:
        owner = owner_of(cluster, task.task_id)
        assert owner is not None
        answers: dict[str, Any] = {}
        stop = asyncio.Event()

        async def one_call(i: int) -> None:
            key = f"k-{i}"
            try:
                answers[key] = await asyncio.wait_for(
                    bridge_client(cluster.front_url, task).call(
                        "workspace.write", {"path": f"w/{i}", "contents": key}, request_id=key
                    ),
                    20,
                )
            except Exception as exc:  # the connection died with the node: unanswered
                answers[key] = exc

        async def fifty_a_second() -> None:
            pending = []
            i = 0
            while not stop.is_set():
                pending.append(asyncio.create_task(one_call(i)))
                i += 1
                await asyncio.sleep(0.02)
            await asyncio.gather(*pending)

        load = asyncio.create_task(fifty_a_second())
        await asyncio.sleep(2)
        killed_at = time.monotonic()
        cluster.kill(owner)
        # The tab comes back on another node, through the front.
        await until(lambda: back_elsewhere(tab), "the tab is back on another node", bound_s=30)
        first_after = None
        while first_after is None:
            answer = await bridge_client(cluster.front_url, task).call("ui.read_view", {})
            if answer.status == "succeeded":
                first_after = time.monotonic() - killed_at
            else:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        stop.set()
        await load
        new_owner = owner_of(cluster, task.task_id)

    assert new_owner not in (None, owner)
    print(f"failover: first successful call {first_after:.2f} s after the kill")
    calls = calls_of(control, task)
    ran = [c for c in calls if c["tool"] == "workspace.write" and c["status"] == "succeeded"]
    # Nothing answered is missing from the store.
    recorded = {c["idempotency_key"] for c in ran}
    answered = {
        k for k, a in answers.items() if not isinstance(a, Exception) and a.status == "succeeded"
    }
    assert answered <= recorded
    # Every call not answered succeeded is, on retry, either its recorded result, a first
    # run (it never started), or in_doubt (it started on the dead node): never a second run.
    in_doubt = 0
    for key in answers:
        if key in answered:
            continue
        i = int(key.split("-")[1])
        retry = await bridge_client(cluster.front_url, task).call(
            "workspace.write", {"path": f"w/{i}", "contents": key}, request_id=key
        )
        if retry.error is not None and retry.error.code == "in_doubt":
            in_doubt += 1
            assert key not in recorded
        else:
            assert retry.status == "succeeded", (key, retry)
    # No key took effect twice: a write leaves its file in the workspace of the node that
    # ran it, so a key run on the killed owner and again on the new one has two files.
    written: dict[str, list[str]] = {}
    for node in cluster.nodes:
        for path in node.data_dir.glob(f"workspaces/*/{task.task_id}/w/*"):
            written.setdefault(path.name, []).append(node.id)
    assert written, "no write left a file"
    assert {i: ids for i, ids in written.items() if len(ids) > 1} == {}
    print(f"kill: {len(answers)} calls, {len(answered)} answered, {in_doubt} in doubt")


async def test_a_frozen_owner_wakes_to_find_its_epoch_gone(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    one, two, _ = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    async with running_tab([one.url], task) as tab:
        frozen_epoch = epoch_of(cluster, one.url, task.task_id)
        cluster.stop(one)  # SIGSTOP
        late = [
            asyncio.create_task(
                bridge_client(two.url, task).call(
                    "workspace.write", {"path": f"f/{i}", "contents": "x"}, request_id=f"f-{i}"
                )
            )
            for i in range(5)
        ]
        await asyncio.sleep(5)
        cluster.cont(one)  # SIGCONT
        await asyncio.gather(*late, return_exceptions=True)
        # The old owner lets the task go; its tab comes back and the task goes on.
        await until(lambda: back_elsewhere(tab), "the tab is back on another node", bound_s=30)
        answer = await bridge_client(two.url, task).call("ui.read_view", {})
        assert answer.status == "succeeded", answer
        after = await bridge_client(two.url, task).call(
            "workspace.write", {"path": "after.txt", "contents": "x"}, request_id="after"
        )
        assert after.status == "succeeded", after

    # What the frozen node did on waking: none of the calls made while it slept wrote a
    # file there (each was fenced out before its tool ran).
    frozen_files = [p.name for p in one.data_dir.rglob("*") if p.parent.name == "f"]
    assert frozen_files == []
    written = [
        c
        for c in calls_of(control, task)
        if c["tool"] == "workspace.write" and c["status"] == "succeeded" and not c["replayed"]
    ]
    # Writes are accepted only under a newer epoch, and there is one at least.
    assert written, "no write was accepted after the failover"
    assert all(record["owner"]["epoch"] > frozen_epoch for record in written), written


def epoch_of(cluster: LocalCluster, node_url: str, task_id: str) -> int:
    with httpx.Client(
        base_url=node_url, headers={"authorization": f"Bearer {cluster.control_key}"}
    ) as http:
        epoch: int = http.get(f"/v1/tasks/{task_id}").json()["node"]["epoch"]
    return epoch


async def succeeded(
    call: Callable[[], Awaitable[ParentToolResult]], within_s: float = 30
) -> ParentToolResult:
    """The call's answer once it succeeds, asked again while every refusal is retryable, as
    a bridge client does."""
    deadline = time.monotonic() + within_s
    while True:
        answer = await call()
        if answer.status == "succeeded":
            return answer
        assert answer.error is not None and answer.error.retryable, answer.error
        assert time.monotonic() < deadline, answer.error
        await asyncio.sleep(0.2)


def back_elsewhere(tab: Any) -> bool:
    """The tab lost its first connection and has another now."""
    return len(tab.connections) >= 2 and bool(tab.connected.is_set())


async def test_calls_resume_after_nats_restarts(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    one, two, _ = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    async with running_tab([one.url], task):
        assert (await bridge_client(two.url, task).call("ui.read_view", {})).status == "succeeded"
        cluster.restart_nats()
        await succeeded(lambda: bridge_client(two.url, task).call("ui.read_view", {}))
    await cluster.wait_on_bus()  # every node, for the tests after this one


async def test_an_artifact_written_on_node_1_is_read_through_node_3_after_node_1_dies(
    cluster: LocalCluster, control: ControlPlane
) -> None:
    one, _, three = cluster.nodes
    task = control.create_task(scopes=SCOPES)
    # Asked again under its request id while the answer says it may, as a bridge client does.
    answer = await succeeded(
        lambda: bridge_client(one.url, task).call(
            "workspace.write", {"path": "a.txt", "contents": "kept"}, request_id="art-1"
        ),
        within_s=10,
    )
    transcript = answer.artifacts.transcripts[0]
    cluster.kill(one)
    async with httpx.AsyncClient(
        base_url=three.url, headers={"authorization": f"Bearer {cluster.control_key}"}
    ) as http:
        response = await http.get(f"/v1/artifacts/{transcript.artifact_id}")
    assert response.status_code == 200
    assert b"kept" in response.content or b"a.txt" in response.content
