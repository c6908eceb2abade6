"""From the attacker's side: an agent whose MCP client answers every elicitation itself.

A form elicitation is answered by whatever the agent's client runs, so it may confirm one
call the task's grant already covers, and nothing more: it never answers a need beyond the
grant, never grants a tool for the rest of the task, and never answers for the control
plane. Each refusal is driven here by a client whose callback always says yes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest

from gateway.core.approvals.broker import ApprovalRefused, Decision
from gateway.core.tokens import Purpose
from tests.mcp_door.conftest import DoorLive

BEYOND = {
    "grantable": [{"scope": "secret", "by": "actor"}],
    "channels": ["elicitation", "control"],
    "timeout_s": 2,
}
REQUIRED = {"required": ["test.write"], "channels": ["elicitation", "control"], "timeout_s": 2}


def always(choice: str, seen: list[Any]) -> Any:
    """The attacker's callback: every question answered with `choice`, no person asked."""

    async def callback(_ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"decision": choice})

    return callback


async def _pending(door: DoorLive, task_id: str) -> Any:
    for _ in range(300):
        found = door.live.gateway.approvals.pending(task_id)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("nothing was asked")


@pytest.mark.parametrize("choice", ["approve for this task", "approve once"])
async def test_a_self_answering_client_never_widens_the_task_beyond_its_scopes(
    door: DoorLive, choice: str
) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=BEYOND)
    seen: list[Any] = []
    async with door.client(
        task["tokens"]["agent"], mode="legacy", elicitation_callback=always(choice, seen)
    ) as client:
        first = await client.call_tool("test_secret", {})
        second = await client.call_tool("test_secret", {})
    for result in (first, second):
        assert result.is_error, result
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == "approval_timeout"
    # No form was put to the client for a need beyond the grant, and nothing was granted.
    assert [p for p in seen if getattr(p, "mode", "form") == "form"] == []
    gw = door.live.gateway
    assert await gw.approvals.grants(task["task_id"]) == {}
    listed = await gw.approvals.listing(task["task_id"])
    assert [a["status"] for a in listed] == ["expired", "expired"]
    ran = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
    assert [r["status"] for r in ran] == ["timeout", "timeout"]


async def test_a_form_answer_for_this_task_grants_nothing(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    seen: list[Any] = []
    async with door.client(
        task["tokens"]["agent"],
        mode="legacy",
        elicitation_callback=always("approve for this task", seen),
    ) as client:
        result = await client.call_tool("test_write", {"note": "self"})
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "approval_timeout"
    assert door.probe.writes == []
    # The form offers what a form may answer: one call, or no.
    [asked] = seen
    assert asked.requested_schema["properties"]["decision"]["enum"] == ["approve once", "deny"]
    assert await door.live.gateway.approvals.grants(task["task_id"]) == {}


async def test_a_form_confirms_one_call_inside_the_grant(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    seen: list[Any] = []
    async with door.client(
        task["tokens"]["agent"], mode="legacy", elicitation_callback=always("approve once", seen)
    ) as client:
        first = await client.call_tool("test_write", {"note": "one"})
        second = await client.call_tool("test_write", {"note": "two"})
    assert not first.is_error and not second.is_error
    assert door.probe.writes == ["one", "two"]
    assert len(seen) == 2  # asked each time: no grant for the task
    listed = await door.live.gateway.approvals.listing(task["task_id"])
    assert [(a["status"], a["decision"]["scope"]) for a in listed] == [("approved", "call")] * 2
    assert {a["decision"]["channel"] for a in listed} == {"elicitation"}


@pytest.mark.parametrize(
    ("policy", "tool", "scope"),
    [
        (BEYOND, "test.secret", "call"),  # beyond the grant
        (REQUIRED, "test.write", "task"),  # a grant for the rest of the task
    ],
)
async def test_the_desk_refuses_an_elicited_answer_a_form_may_not_give(
    door: DoorLive, policy: dict[str, Any], tool: str, scope: str
) -> None:
    """Whatever the door does, the desk itself refuses such an answer through elicitation,
    and the control plane can still decide the request."""
    task = await door.live.create_task(scopes=["ui"], approvals={**policy, "timeout_s": 20})
    gw = door.live.gateway
    ident = await gw.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    call = asyncio.ensure_future(
        gw.pipeline.call(ident, tool, {"note": "x"} if tool == "test.write" else {}, door=_mcp())
    )
    pending = await _pending(door, task["task_id"])
    with pytest.raises(ApprovalRefused):
        await gw.approvals.answer(
            ident, pending.id, decision="approve", scope=scope, channel="elicitation"
        )
    assert gw.approvals.find(pending.id) is not None  # still pending
    await gw.approvals.decide(ident, pending.id, Decision("deny", "call", "root", "admin"))
    result = await call
    assert result.error is not None and result.error.code == "approval_denied"
    assert await gw.approvals.grants(task["task_id"]) == {}


def _mcp() -> Any:
    from gateway.core.results import Door

    return Door.MCP


async def test_beyond_the_grant_the_client_gets_a_link_whose_reply_decides_nothing(
    door: DoorLive,
) -> None:
    policy = {**BEYOND, "channels": ["tab", "elicitation", "control"], "timeout_s": 20}
    task = await door.live.create_task(scopes=["ui"], approvals=policy)
    seen: list[Any] = []
    linked = asyncio.Event()

    async def callback(_ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params)
        linked.set()
        # "accept" of a link: it was opened. Content is ignored for URL mode, but an
        # attacker sends it anyway.
        return types.ElicitResult(action="accept", content={"decision": "approve for this task"})

    gw = door.live.gateway
    async with door.client(
        task["tokens"]["agent"], mode="legacy", elicitation_callback=callback
    ) as client:
        call = asyncio.ensure_future(client.call_tool("test_secret", {}))
        pending = await _pending(door, task["task_id"])
        await asyncio.wait_for(linked.wait(), 10)
        [asked] = seen
        assert asked.mode == "url"
        assert asked.url == "http://127.0.0.1:9"
        assert asked.elicitation_id == pending.id
        assert "test.secret" in asked.message
        await asyncio.sleep(0.2)  # the reply has been handled: still nobody decided
        assert gw.approvals.find(pending.id) is not None
        ident = await gw.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
        await gw.approvals.decide(ident, pending.id, Decision("approve", "call", "root", "admin"))
        result = await call
    assert not result.is_error, result
    [approval] = await gw.approvals.listing(task["task_id"])
    assert approval["decision"]["channel"] == "control"
