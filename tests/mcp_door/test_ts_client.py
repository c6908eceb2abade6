"""The MCP door as the official TypeScript SDK client sees it (a client we did not write):
names it and stricter clients accept, calls by either name, progress, cancellation, and an
agent that reconnects 40 times without ever deleting its session."""

from __future__ import annotations

import asyncio
import re

import pytest

from gateway.mcp_door import McpDoor
from tests.clients.npm import ensure_installed, ts_agent
from tests.mcp_door.conftest import DoorLive

# The pattern Claude Desktop enforces on a whole tool list (Codex and Copilot alike).
CLIENT_SAFE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture(scope="module", autouse=True)
def _clients() -> None:
    ensure_installed()


def _plan(door: DoorLive, token: str, scenario: str, **more: object) -> dict[str, object]:
    return {"url": door.url, "token": token, "scenario": scenario, **more}


async def test_every_listed_name_is_client_safe_and_either_name_calls(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui", "secret"])
    token = task["tokens"]["agent"]
    listed = await ts_agent(_plan(door, token, "list"))
    names = listed["names"]
    assert names and all(CLIENT_SAFE.match(n) for n in names), names
    assert {"test_noop", "test_secret", "test_wait_ui"} <= set(names)
    by_exposed = await ts_agent(_plan(door, token, "call", tool="test_noop"))
    by_id = await ts_agent(_plan(door, token, "call", tool="test.noop"))
    for result in (by_exposed, by_id):
        assert result["isError"] is False
        assert result["structured"]["status"] == "succeeded"
        assert result["structured"]["tool"] == "test.noop"  # evidence and results: the id
        assert result["content"][0] == {"type": "text", "text": "test.noop succeeded\nok: true"}


async def test_progress_reaches_the_typescript_client(door: DoorLive) -> None:
    task = await door.live.create_task()
    result = await ts_agent(
        _plan(
            door, task["tokens"]["agent"], "progress", tool="test_progress", arguments={"steps": 3}
        )
    )
    assert result["structured"]["status"] == "succeeded"
    assert [p["progress"] for p in result["progress"]] == [1, 2, 3]


async def test_cancelling_from_the_typescript_client_cancels_the_handler(door: DoorLive) -> None:
    task = await door.live.create_task()
    result = await ts_agent(
        _plan(door, task["tokens"]["agent"], "cancel", tool="test_wait_ui", after_ms=1000)
    )
    assert result["error"]
    await asyncio.wait_for(door.probe.cancelled.wait(), 10)
    calls = []
    for _ in range(100):
        calls = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
        if calls:
            break
        await asyncio.sleep(0.05)
    assert [(c["tool"], c["status"], c["error"]["code"]) for c in calls] == [
        ("test.wait_ui", "failed", "cancelled")
    ]


async def test_forty_reconnects_without_delete_never_lock_the_task_out(door: DoorLive) -> None:
    task = await door.live.create_task()
    result = await ts_agent(
        _plan(door, task["tokens"]["agent"], "reconnect", tool="test_noop", times=40),
        timeout_s=300,
    )
    assert result["rounds"] == ["ok"] * 40
    mcp = door.live.gateway.services.get(McpDoor)
    held = mcp.sessions.open_for(task["task_id"])
    assert len(held) <= mcp.sessions.cap
    assert mcp.sessions.evicted >= 40 - mcp.sessions.cap
