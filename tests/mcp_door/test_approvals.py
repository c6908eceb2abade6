"""Approval at the MCP door: the person at the agent's client answers by elicitation, the
permission-prompt tool answers JSON a coding agent parses, and a waiting call hears that it
still waits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types

from gateway.core.approvals.broker import Decision
from gateway.core.tokens import Purpose
from tests.mcp_door.conftest import MODES, DoorLive

REQUIRED = {"required": ["test.write"], "channels": ["elicitation", "control"], "timeout_s": 20}


def answering(choice: str | None, action: str = "accept", seen: list[Any] | None = None) -> Any:
    async def callback(_ctx: Any, params: Any) -> types.ElicitResult:
        if seen is not None:
            seen.append(params)
        content = {"decision": choice} if choice is not None else None
        return types.ElicitResult(action=action, content=content)

    return callback


async def test_the_person_at_the_client_approves_by_elicitation(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    seen: list[Any] = []
    async with door.client(
        task["tokens"]["agent"],
        mode="legacy",
        elicitation_callback=answering("approve once", seen=seen),
    ) as client:
        result = await client.call_tool("test_write", {"note": "hello"})
        assert not result.is_error, result
    assert door.probe.writes == ["hello"]
    assert len(seen) == 1
    assert "test.write" in seen[0].message
    [approval] = await door.live.gateway.approvals.listing(task["task_id"])
    assert approval["status"] == "approved"
    assert approval["decision"]["channel"] == "elicitation"
    assert approval["decision"]["approver"]["id"] == "user_1"


async def test_declining_the_form_denies_the_call(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    async with door.client(
        task["tokens"]["agent"], mode="legacy", elicitation_callback=answering(None, "decline")
    ) as client:
        result = await client.call_tool("test_write", {"note": "no"})
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "approval_denied"
    assert door.probe.writes == []


async def test_a_form_for_a_control_approval_is_never_sent(door: DoorLive) -> None:
    by_control = {
        "grantable": [{"tool": "test.admin", "by": "control"}],
        "channels": ["elicitation", "control"],
    }
    task = await door.live.create_task(role="member", scopes=["ui"], approvals=by_control)
    seen: list[Any] = []
    gw = door.live.gateway
    async with door.client(
        task["tokens"]["agent"],
        mode="legacy",
        elicitation_callback=answering("approve once", seen=seen),
    ) as client:
        call = asyncio.ensure_future(client.call_tool("test_admin", {}))
        pending = await _pending(gw, task["task_id"])
        record = await gw.tasks.get(task["task_id"])
        await gw.approvals.decide(
            record.identity, pending.id, Decision("deny", "call", "root", "admin")
        )
        result = await call
    assert result.is_error
    assert seen == []


async def _pending(gw: Any, task_id: str) -> Any:
    for _ in range(300):
        found = gw.approvals.pending(task_id)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("nothing was asked")


@MODES
async def test_the_permission_prompt_answers_json_a_coding_agent_parses(
    door: DoorLive, mode: str
) -> None:
    policy = {"channels": ["control"]}
    task = await door.live.create_task(scopes=["ui", "approvals:prompt"], approvals=policy)
    gw = door.live.gateway
    ident = await gw.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    async with door.client(task["tokens"]["agent"], mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "approval_prompt" in names
        asked = {"tool_name": "Bash", "input": {"command": "rm -rf build"}, "tool_use_id": "tu_1"}
        call = asyncio.ensure_future(client.call_tool("approval_prompt", asked))
        pending = await _pending(gw, task["task_id"])
        assert "rm -rf build" in pending.summary
        await gw.approvals.decide(ident, pending.id, Decision("approve", "call", "root", "admin"))
        allowed = await call
        call = asyncio.ensure_future(client.call_tool("approval_prompt", asked))
        pending = await _pending(gw, task["task_id"])
        await gw.approvals.decide(
            ident, pending.id, Decision("deny", "call", "root", "admin", "control", "not in CI")
        )
        denied = await call
    [allow_text] = [c.text for c in allowed.content if isinstance(c, types.TextContent)]
    assert json.loads(allow_text) == {"behavior": "allow", "updatedInput": asked["input"]}
    [deny_text] = [c.text for c in denied.content if isinstance(c, types.TextContent)]
    answer = json.loads(deny_text)
    assert answer["behavior"] == "deny"
    assert "not in CI" in answer["message"]
