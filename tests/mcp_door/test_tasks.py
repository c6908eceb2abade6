"""Long calls as MCP tasks, through the official TypeScript SDK client's tasks API: started,
polled, read and cancelled with the same evidence and statuses as a direct call; bound to
the task whose token made them (tried with another task's and another organization's);
bounded in number and kept only for their ttl."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest

from gateway.mcp_door import McpDoor
from gateway.mcp_door.call_tasks import CallTasks
from tests.clients.npm import ensure_installed, ts_agent
from tests.mcp_door.conftest import DoorLive

INVALID_PARAMS = -32602


@pytest.fixture(scope="module", autouse=True)
def _clients() -> None:
    ensure_installed()


def _plan(door: DoorLive, token: str, scenario: str, **more: object) -> dict[str, object]:
    return {"url": door.url, "token": token, "scenario": scenario, **more}


async def _calls(door: DoorLive, task_id: str, count: int = 1) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    for _ in range(200):
        calls = [r for r in await door.evidence(task_id) if r["kind"] == "call"]
        if len(calls) >= count:
            break
        await asyncio.sleep(0.05)
    return calls


def _public(structured: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in structured.items() if k != "call_id"}


async def test_a_long_call_runs_as_a_task_with_the_result_and_evidence_of_a_direct_one(
    door: DoorLive,
) -> None:
    task = await door.live.create_task()
    token = task["tokens"]["agent"]
    ran = await ts_agent(_plan(door, token, "task_call", tool="test_long"))
    assert ran["execution"]["test_long"] == {"taskSupport": "optional"}
    assert ran["execution"]["test_noop"] is None  # a quick tool is never a task
    kinds = [(e["type"], e.get("status")) for e in ran["events"]]
    assert kinds[0] == ("taskCreated", "working")
    assert kinds[-2:] == [("taskStatus", "completed"), ("result", None)]
    result = ran["result"]
    assert result["meta"] == {"io.modelcontextprotocol/related-task": {"taskId": ran["taskId"]}}
    direct = await ts_agent(_plan(door, token, "call", tool="test_long"))
    assert _public(result["structured"]) == _public(direct["structured"])
    assert result["content"] == direct["content"]
    calls = await _calls(door, task["task_id"], 2)
    assert [(c["tool"], c["door"], c["status"]) for c in calls] == [
        ("test.long", "mcp", "succeeded"),
        ("test.long", "mcp", "succeeded"),
    ]
    assert result["structured"]["call_id"] == calls[0]["call_id"]


async def test_every_failure_is_a_failed_task_whose_result_names_the_calls_status(
    door: DoorLive,
) -> None:
    task = await door.live.create_task()
    token = task["tokens"]["agent"]
    for status in ("denied", "unavailable", "timeout", "failed"):
        ran = await ts_agent(
            _plan(door, token, "task_call", tool="test_long", arguments={"end_as": status})
        )
        last = [e for e in ran["events"] if e["type"] == "taskStatus"][-1]
        assert (last["status"], last["statusMessage"]) == ("failed", f"{status}: asked")
        assert ran["result"]["isError"] is True
        assert ran["result"]["structured"]["status"] == status
        assert ran["result"]["structured"]["error"]["code"] == "asked"


async def test_a_quick_tool_refuses_a_task_and_a_plain_call_is_answered_directly(
    door: DoorLive,
) -> None:
    task = await door.live.create_task()
    token = task["tokens"]["agent"]
    refused = await ts_agent(_plan(door, token, "task_start", tool="test_noop"))
    assert refused["task"]["code"] == -32601
    plain = await ts_agent(_plan(door, token, "call", tool="test_long"))
    assert plain["structured"]["status"] == "succeeded"
    listed = await ts_agent(_plan(door, token, "task_ops", task_id="", ops=["list"]))
    assert listed["list"]["tasks"] == []  # neither made a task


async def test_cancelling_a_task_cancels_its_call_and_it_stays_cancelled(door: DoorLive) -> None:
    task = await door.live.create_task()
    token = task["tokens"]["agent"]
    started = await ts_agent(
        _plan(door, token, "task_start", tool="test_long", arguments={"wait": True})
    )
    task_id = started["task"]["taskId"]
    await asyncio.wait_for(door.probe.started.wait(), 10)
    ops = await ts_agent(
        _plan(door, token, "task_ops", task_id=task_id, ops=["get", "cancel", "result"])
    )
    assert ops["get"]["task"]["status"] == "working"
    assert ops["cancel"]["task"]["status"] == "cancelled"
    await asyncio.wait_for(door.probe.cancelled.wait(), 10)
    assert ops["result"]["structured"]["status"] == "failed"
    assert ops["result"]["structured"]["error"]["code"] == "cancelled"
    again = await ts_agent(_plan(door, token, "task_ops", task_id=task_id, ops=["get", "cancel"]))
    assert again["get"]["task"]["status"] == "cancelled"
    assert again["cancel"]["code"] == INVALID_PARAMS  # a terminal task is not cancelled again
    calls = await _calls(door, task["task_id"])
    assert [(c["status"], c["error"]["code"]) for c in calls] == [("failed", "cancelled")]


@pytest.mark.parametrize("org", ["org_a", "org_b"])
async def test_another_tasks_token_cannot_see_read_or_cancel_a_task(
    door: DoorLive, org: str
) -> None:
    owner = await door.live.create_task()
    attacker = await door.live.create_task(org=org, actor="user_2")
    started = await ts_agent(
        _plan(
            door, owner["tokens"]["agent"], "task_start", tool="test_long", arguments={"wait": True}
        )
    )
    task_id = started["task"]["taskId"]
    await asyncio.wait_for(door.probe.started.wait(), 10)
    tried = await ts_agent(
        _plan(
            door,
            attacker["tokens"]["agent"],
            "task_ops",
            task_id=task_id,
            ops=["get", "result", "cancel", "list"],
        )
    )
    for op in ("get", "result", "cancel"):
        assert tried[op]["code"] == INVALID_PARAMS, tried[op]
        assert "not yours" in tried[op]["error"]
    assert tried["list"]["tasks"] == []
    mine = await ts_agent(
        _plan(door, owner["tokens"]["agent"], "task_ops", task_id=task_id, ops=["get", "list"])
    )
    assert mine["get"]["task"]["status"] == "working"  # the attacker's cancel did nothing
    assert [t["taskId"] for t in mine["list"]["tasks"]] == [task_id]
    assert not door.probe.cancelled.is_set()
    door.probe.ui_reply.set()
    done = await ts_agent(
        _plan(door, owner["tokens"]["agent"], "task_ops", task_id=task_id, ops=["result"])
    )
    assert done["result"]["structured"]["status"] == "succeeded"
    assert door.probe.identities == [owner["task_id"]]


async def test_ending_the_task_drops_its_tasks_and_stops_their_calls(door: DoorLive) -> None:
    owner = await door.live.create_task()
    started = await ts_agent(
        _plan(
            door, owner["tokens"]["agent"], "task_start", tool="test_long", arguments={"wait": True}
        )
    )
    await asyncio.wait_for(door.probe.started.wait(), 10)
    tasks = door.live.gateway.services.get(McpDoor).call_tasks
    assert tasks.held(owner["task_id"]) == 1
    await door.live.end_task(owner["task_id"])
    await asyncio.wait_for(door.probe.cancelled.wait(), 10)
    assert tasks.held(owner["task_id"]) == 0
    with pytest.raises(Exception, match="not yours"):
        tasks.find(owner["task_id"], started["task"]["taskId"])


def _finished() -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content={"status": "succeeded"})


async def test_a_task_holds_a_bounded_number_and_a_finished_one_makes_room() -> None:
    tasks = CallTasks(max_held=2)
    release = asyncio.Event()

    async def long(_cancel: asyncio.Event) -> types.CallToolResult:
        await release.wait()
        return _finished()

    async def quick(_cancel: asyncio.Event) -> types.CallToolResult:
        return _finished()

    first = tasks.start("tk_1", "t", None, long)
    tasks.start("tk_1", "t", None, long)
    with pytest.raises(Exception, match="quota_exceeded"):
        tasks.start("tk_1", "t", None, quick)
    other = tasks.start("tk_2", "t", None, quick)  # another task has its own room
    await other.done.wait()
    release.set()
    await first.done.wait()
    assert first.status == "completed"
    third = tasks.start("tk_1", "t", None, quick)  # the oldest finished one gave way
    assert tasks.held("tk_1") == 2
    with pytest.raises(Exception, match="not yours"):
        tasks.find("tk_1", first.id)
    assert tasks.find("tk_1", third.id) is third


async def test_a_task_past_its_ttl_is_dropped_and_its_call_told_to_stop() -> None:
    tasks = CallTasks(min_ttl_ms=50)
    stopped = asyncio.Event()

    async def long(cancel: asyncio.Event) -> types.CallToolResult:
        await cancel.wait()
        stopped.set()
        return _finished()

    task = tasks.start("tk_1", "t", 50, long)
    assert task.ttl_ms == 50
    await asyncio.wait_for(stopped.wait(), 5)
    with pytest.raises(Exception, match="not yours"):
        tasks.find("tk_1", task.id)
    assert tasks.held("tk_1") == 0


async def test_a_stateless_client_runs_polls_and_reads_a_task(door: DoorLive) -> None:
    """The 2026-07-28 protocol (no session), with the Python SDK client's raw requests:
    every request stands alone, and any of them may poll."""
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"], mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.extensions is not None
        assert "io.modelcontextprotocol/tasks" in client.server_capabilities.extensions
        created = await client.session.send_request(
            types.CallToolRequest(
                params=types.CallToolRequestParams(
                    name="test_long", arguments={}, task=types.TaskMetadata(ttl=60_000)
                )
            ),
            types.CreateTaskResult,
        )
        assert created.task.status == "working"
        assert created.task.ttl == 60_000
        ask = types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=created.task.task_id)
        )
        result = await client.session.send_request(ask, types.CallToolResult)
        polled = await client.session.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=created.task.task_id)),
            types.GetTaskResult,
        )
    assert polled.status == "completed"
    assert result.structured_content is not None
    assert result.structured_content["status"] == "succeeded"


async def test_a_malformed_task_request_is_invalid_params_and_starts_nothing(
    door: DoorLive,
) -> None:
    task = await door.live.create_task()
    headers = {
        "authorization": f"Bearer {task['tokens']['agent']}",
        "mcp-protocol-version": "2025-11-25",
        "accept": "application/json, text/event-stream",
    }
    init = await door.live.http.post(
        "/v1/mcp",
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
    )
    assert init.status_code == 200, init.text
    assert '"tasks"' in init.text  # the capability is advertised at the handshake
    session = {**headers, "mcp-session-id": init.headers["mcp-session-id"]}
    await door.live.http.post(
        "/v1/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    bad = await door.live.http.post(
        "/v1/mcp",
        headers=session,
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "test_long", "arguments": {}, "task": {"ttl": "soon"}},
        },
    )
    assert bad.status_code == 200, bad.text
    assert '"code":-32602' in bad.text.replace(" ", ""), bad.text
    tasks = door.live.gateway.services.get(McpDoor).call_tasks
    assert tasks.held(task["task_id"]) == 0
    assert door.probe.identities == []
