"""Replaying corpus cases at the HTTP doors: `POST /v1/tasks`, MCP (`/v1/mcp`, plain
JSON-RPC posts of the per-request protocol), `POST /v1/parent-tools`, `POST /v1/delegations`.

Each replay returns what came back and leaves the checking of "nothing accepted" and "a
good call still works" to the caller, which knows the door's counters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from mcp.shared.inbound import encode_header_value

from gateway.core.tokens import Purpose
from tests.conftest import task_body
from tests.hostile.arena import (
    MCP_META,
    MCP_VERSION,
    SENTINEL,
    Arena,
    auth_headers,
    chunks,
    raw_body,
)


@dataclass
class Answer:
    status: int
    body: Any


async def _post(
    arena: Arena, path: str, data: bytes, headers: dict[str, str], chunked: bool = False
) -> Answer:
    response = await arena.http.post(
        path,
        content=chunks(data) if chunked else data,
        headers={"content-type": "application/json", **headers},
    )
    return Answer(response.status_code, _decode(response))


def _decode(response: httpx.Response) -> Any:
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        # The last `data:` line of the stream is the JSON-RPC response.
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else ""
    try:
        return json.loads(text)
    except ValueError:
        return text


# -- POST /v1/tasks ----------------------------------------------------------------------


async def replay_tasks(arena: Arena, send: dict[str, Any]) -> Answer:
    if "auth" in send:
        headers = auth_headers(arena, send["auth"], Purpose.AGENT)
    else:
        headers = dict(arena.control)
    return await _post(arena, "/v1/tasks", raw_body(send), headers, bool(send.get("chunked")))


async def good_task(arena: Arena) -> None:
    response = await arena.http.post(
        "/v1/tasks", json=task_body(org="org_h", scopes=["ui"]), headers=arena.control
    )
    assert response.status_code == 201, response.text
    ended = await arena.http.delete(
        f"/v1/tasks/{response.json()['task_id']}", headers=arena.control
    )
    assert ended.status_code == 200


# -- MCP -----------------------------------------------------------------------------------


def _header_name(name: Any) -> str:
    """The `Mcp-Name` header for a tool name; one no header can carry is sent as-is escaped."""
    if not isinstance(name, str):
        return str(name)
    try:
        return encode_header_value(name)
    except UnicodeEncodeError:
        return name.encode("ascii", "backslashreplace").decode()


def mcp_request(send: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A tools/call (or another method) of the per-request protocol, with its headers."""
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MCP_VERSION,
    }
    if "call" not in send and "rpc" not in send:
        return raw_body(send), headers
    if "call" in send:
        call = send["call"]
        params: dict[str, Any] = {
            "name": call["name"],
            "arguments": call["arguments"],
            "_meta": {**MCP_META, **call.get("_meta_extra", {})},
        }
        method = "tools/call"
        name = call["name"]
        headers["mcp-name"] = _header_name(name)
    else:
        method = send["rpc"]["method"]
        params = {**send["rpc"].get("params", {}), "_meta": MCP_META}
    headers["mcp-method"] = method
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return raw_body({"body": body, **{k: v for k, v in send.items() if k == "pad_to"}}), headers


async def replay_mcp(arena: Arena, send: dict[str, Any], task: str = "main") -> Answer:
    data, headers = mcp_request(send)
    token_spec = send.get("token", {"purpose_minted": "agent"})
    if "token" not in send and task != "main":
        headers["authorization"] = f"Bearer {arena.token('agent', task)}"
    else:
        headers.update(auth_headers(arena, token_spec, Purpose.AGENT))
    for name, value in send.get("headers", {}).items():
        headers[name] = value
    return await _post(arena, "/v1/mcp", data, headers, bool(send.get("chunked")))


def tool_result(answer: Answer) -> dict[str, Any] | None:
    """The structured tool result of a tools/call answer, or None for a JSON-RPC error."""
    body = answer.body
    if not isinstance(body, dict) or "result" not in body:
        return None
    structured: dict[str, Any] = body["result"].get("structuredContent") or {}
    return structured


async def good_mcp_call(arena: Arena) -> dict[str, Any]:
    answer = await replay_mcp(
        arena, {"call": {"name": SENTINEL, "arguments": {"note": arena.unique("good")}}}
    )
    assert answer.status == 200, answer.body
    result = tool_result(answer)
    assert result is not None, answer.body
    assert result["status"] == "succeeded", result
    return result


# -- the bridge and delegations ------------------------------------------------------------


async def replay_parent_tools(arena: Arena, send: dict[str, Any]) -> Answer:
    headers = auth_headers(arena, send.get("token", {"purpose_minted": "bridge"}), Purpose.BRIDGE)
    return await _post(
        arena, "/v1/parent-tools", raw_body(send, "envelope"), headers, bool(send.get("chunked"))
    )


async def good_parent_tool(arena: Arena) -> None:
    envelope = {
        "schema": "wp-codebox/parent-tool-request/v1",
        "version": 1,
        "request_id": arena.unique("ptr_good"),
        "tool": SENTINEL,
        "operation": "call",
        "input": {"note": "good"},
        "sandbox_session": {"caller_session_id": "job_h"},
        "authorization": {"allowed_tools": [], "principal": {}},
        "metadata": {},
    }
    answer = await replay_parent_tools(arena, {"envelope": envelope})
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "succeeded", answer.body


async def replay_delegations(arena: Arena, send: dict[str, Any]) -> Answer:
    headers = auth_headers(arena, send.get("token", {"purpose_minted": "agent"}), Purpose.AGENT)
    return await _post(
        arena, "/v1/delegations", raw_body(send, "envelope"), headers, bool(send.get("chunked"))
    )


async def good_delegation(arena: Arena) -> None:
    envelope = {
        "schema": "wp-codebox/host-delegation-request/v1",
        "version": 1,
        "request_id": arena.unique("hdr_good"),
        "goal": "a good delegation",
        "orchestrator": {"adapter": "local"},
        "execution": {"steps": [{"tool": SENTINEL, "input": {"note": "good"}}]},
    }
    answer = await replay_delegations(arena, {"envelope": envelope})
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "completed", answer.body
