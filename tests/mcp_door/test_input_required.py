"""Approvals for a client of the 2026-07-28 protocol, which has no back channel: the
question comes back as an `input_required` result, and the client's retry answers it.
The official Python SDK client drives the retry itself, as an agent's client would."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import mcp_types as types

from gateway.core.approvals.broker import Decision
from gateway.core.tokens import Purpose
from gateway.mcp_door import McpDoor
from tests.mcp_door.conftest import DoorLive

REQUIRED = {"required": ["test.write"], "channels": ["elicitation", "control"], "timeout_s": 20}
BEYOND = {
    "grantable": [{"scope": "secret", "by": "actor"}],
    "channels": ["tab", "elicitation", "control"],
    "timeout_s": 20,
}


def always(choice: str, seen: list[Any]) -> Any:
    async def callback(_ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"decision": choice})

    return callback


async def test_a_stateless_client_approves_one_call_on_retry(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    seen: list[Any] = []
    async with door.client(
        task["tokens"]["agent"], mode="auto", elicitation_callback=always("approve once", seen)
    ) as client:
        result = await client.call_tool("test_write", {"note": "retried"})
    assert not result.is_error, result
    assert door.probe.writes == ["retried"]
    [asked] = seen
    assert asked.mode == "form" and "test.write" in asked.message
    [approval] = await door.live.gateway.approvals.listing(task["task_id"])
    assert approval["status"] == "approved"
    assert approval["decision"]["channel"] == "elicitation"
    assert approval["door"] == "mcp"
    calls = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
    assert [(c["tool"], c["status"]) for c in calls] == [("test.write", "succeeded")]


async def test_a_stateless_self_approval_never_widens_the_task(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=BEYOND)
    seen: list[Any] = []
    gw = door.live.gateway
    async with door.client(
        task["tokens"]["agent"],
        mode="auto",
        elicitation_callback=always("approve for this task", seen),
    ) as client:
        call = asyncio.ensure_future(client.call_tool("test_secret", {}))
        for _ in range(500):
            if seen:
                break
            await asyncio.sleep(0.01)
        [asked] = seen
        # Beyond the grant: a link to the dashboard, never a form.
        assert asked.mode == "url" and asked.url == "http://127.0.0.1:9"
        [pending] = gw.approvals.pending(task["task_id"])
        await asyncio.sleep(0.2)
        assert gw.approvals.find(pending.id) is not None  # the reply decided nothing
        ident = await gw.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
        await gw.approvals.decide(ident, pending.id, Decision("deny", "call", "root", "admin"))
        result = await call
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "approval_denied"
    assert await gw.approvals.grants(task["task_id"]) == {}


async def _first_exchange(door: DoorLive, token: str, arguments: dict[str, Any]) -> Any:
    """A hand-written 2026-07-28 request, to see (and tamper with) the raw answer."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        response = await http.post(door.url, headers=_headers(token), json=_call(arguments))
    assert response.status_code == 200, response.text
    return response.json()


def _headers(token: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {token}",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "test_write",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }


def _call(arguments: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "test_write",
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            },
            **more,
        },
    }


async def test_a_retry_is_bound_to_its_task_tool_and_arguments(door: DoorLive) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    other = await door.live.create_task(scopes=["ui"], approvals=REQUIRED)
    token = task["tokens"]["agent"]
    first = await _first_exchange(door, token, {"note": "bound"})
    result = first["result"]
    assert result["resultType"] == "input_required", first
    state = result["requestState"]
    assert list(result["inputRequests"]) == ["approval"]
    answer = {"approval": {"action": "accept", "content": {"decision": "approve once"}}}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        tampered = [
            (token, _call({"note": "something else"}, requestState=state, inputResponses=answer)),
            (
                other["tokens"]["agent"],
                _call({"note": "bound"}, requestState=state, inputResponses=answer),
            ),
            (token, _call({"note": "bound"}, requestState="made-up", inputResponses=answer)),
        ]
        for who, body in tampered:
            refused = (await http.post(door.url, headers=_headers(who), json=body)).json()
            assert refused["error"]["code"] == -32602, refused
        assert door.probe.writes == []
        # The call waits on; its own retry answers it.
        body = _call({"note": "bound"}, requestState=state, inputResponses=answer)
        done = (await http.post(door.url, headers=_headers(token), json=body)).json()
    assert done["result"]["structuredContent"]["status"] == "succeeded", done
    assert door.probe.writes == ["bound"]
    assert door.live.gateway.services.get(McpDoor).parked_calls.held(task["task_id"]) == 0
