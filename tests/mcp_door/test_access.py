"""Who may use the MCP door, and what each identity sees and may call (attacker's side)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from gateway.mcp_door import McpDoor
from tests.mcp_door.conftest import MODES, DoorLive

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def post_initialize(door: DoorLive, token: str | None, **headers: str) -> httpx.Response:
    sent = dict(MCP_HEADERS, **headers)
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    return await door.live.http.post("/v1/mcp", json=INITIALIZE, headers=sent)


@pytest.mark.parametrize("purpose", ["tab", "bridge"])
async def test_tab_and_bridge_tokens_are_refused(door: DoorLive, purpose: str) -> None:
    task = await door.live.create_task()
    response = await post_initialize(door, task["tokens"][purpose])
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "invalid_token"
    assert set(error) >= {"code", "message", "retryable"}


@pytest.mark.parametrize(
    "token",
    [None, "Bearer", "not-a-token", "control-key-for-tests-0123456789"],
    ids=["missing", "scheme-only", "garbage", "control-key"],
)
async def test_missing_or_foreign_credentials_are_refused(
    door: DoorLive, token: str | None
) -> None:
    response = await post_initialize(door, token)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"


async def test_the_agent_token_opens_the_door(door: DoorLive) -> None:
    task = await door.live.create_task()
    response = await post_initialize(door, task["tokens"]["agent"])
    assert response.status_code == 200
    assert response.headers["mcp-session-id"]


async def test_a_session_cannot_be_used_with_another_tasks_token(door: DoorLive) -> None:
    mine = await door.live.create_task()
    theirs = await door.live.create_task(org="org_b", actor="user_b")
    opened = await post_initialize(door, mine["tokens"]["agent"])
    session_id = opened.headers["mcp-session-id"]
    hijack = await door.live.http.post(
        "/v1/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        headers={
            **MCP_HEADERS,
            "authorization": f"Bearer {theirs['tokens']['agent']}",
            "mcp-session-id": session_id,
            "mcp-protocol-version": "2025-11-25",
        },
    )
    assert hijack.status_code == 404


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example"}, 421),
        ({"host": "127.0.0.1:80.evil.example"}, 421),
        ({"host": "evil.example:8000"}, 421),
        ({"origin": "http://evil.example"}, 403),
        ({"origin": "null"}, 403),
    ],
)
async def test_foreign_host_or_origin_is_refused_before_the_token(
    door: DoorLive, headers: dict[str, str], status: int
) -> None:
    task = await door.live.create_task()
    response = await post_initialize(door, task["tokens"]["agent"], **headers)
    assert response.status_code == status
    assert response.json()["error"]["code"] == "forbidden"


async def test_catalog_differs_by_role(door: DoorLive) -> None:
    admin = await door.live.create_task(role="admin")
    member = await door.live.create_task(role="member", actor="user_2")
    async with door.client(admin["tokens"]["agent"]) as client:
        admin_tools = {t.name for t in (await client.list_tools()).tools}
    async with door.client(member["tokens"]["agent"]) as client:
        member_tools = {t.name for t in (await client.list_tools()).tools}
        denied = await client.call_tool("test.admin", {})
    # Listed under the names clients accept; called by its id above, which still works.
    assert "test_admin" in admin_tools
    assert "test_admin" not in member_tools
    assert admin_tools - member_tools == {"test_admin"}
    assert denied.is_error is True
    assert denied.structured_content["status"] == "denied"
    assert denied.structured_content["error"]["code"] == "forbidden"


@MODES
async def test_listing_is_not_authority(door: DoorLive, mode: str) -> None:
    scoped = await door.live.create_task(scopes=["ui", "secret"])
    plain = await door.live.create_task(scopes=["ui"], actor="user_3")
    narrowed = await door.live.create_task(scopes=["ui", "secret"], allowed_tools=["test.noop"])
    async with door.client(scoped["tokens"]["agent"], mode=mode) as client:
        assert "test_secret" in {t.name for t in (await client.list_tools()).tools}
        granted = await client.call_tool("test.secret", {})
    async with door.client(plain["tokens"]["agent"], mode=mode) as client:
        assert "test_secret" not in {t.name for t in (await client.list_tools()).tools}
        refused = await client.call_tool("test.secret", {})
    async with door.client(narrowed["tokens"]["agent"], mode=mode) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"test_noop"}
        narrowed_refusal = await client.call_tool("test.secret", {})
    assert granted.structured_content["status"] == "succeeded"
    for result in (refused, narrowed_refusal):
        assert result.is_error is True
        assert result.structured_content["status"] == "denied"
        assert result.structured_content["error"]["code"] == "forbidden"
    evidence = await door.evidence(plain["task_id"])
    assert [(r["tool"], r["status"]) for r in evidence if r["kind"] == "call"] == [
        ("test.secret", "denied")
    ]


async def test_ending_the_task_ends_its_session(door: DoorLive) -> None:
    task = await door.live.create_task()
    sessions = door.live.gateway.services.get(McpDoor).sessions
    async with door.client(task["tokens"]["agent"], mode="legacy") as client:
        ok = await client.call_tool("test.noop", {})
        assert ok.structured_content["status"] == "succeeded"
        assert len(sessions.open_for(task["task_id"])) == 1
        session_id = sessions.open_for(task["task_id"])[0]

        await door.live.end_task(task["task_id"])

        assert sessions.open_for(task["task_id"]) == []
        with pytest.raises(MCPError):
            await asyncio.wait_for(client.call_tool("test.noop", {}), 10)
    # The next request with the revoked token is refused, whatever session it names.
    again = await door.live.http.post(
        "/v1/mcp",
        json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}},
        headers={
            **MCP_HEADERS,
            "authorization": f"Bearer {task['tokens']['agent']}",
            "mcp-session-id": session_id,
        },
    )
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "revoked"
    # And the session is gone from the SDK's manager too: a DELETE for it is unknown.
    assert session_id not in door.live.gateway.services.get(McpDoor).manager._server_instances


async def test_ending_the_task_refuses_the_stateless_protocol_too(door: DoorLive) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"]) as client:
        assert (await client.call_tool("test.noop", {})).structured_content["status"] == (
            "succeeded"
        )
        await door.live.end_task(task["task_id"])
        with pytest.raises(MCPError):
            await asyncio.wait_for(client.call_tool("test.noop", {}), 10)
    refused = await door.live.http.post(
        "/v1/mcp",
        json={"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}},
        headers={
            **MCP_HEADERS,
            "authorization": f"Bearer {task['tokens']['agent']}",
            "mcp-protocol-version": "2026-07-28",
        },
    )
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "revoked"
    calls = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
    assert len(calls) == 1


def _on_session(token: str, session_id: str) -> dict[str, str]:
    return {
        **MCP_HEADERS,
        "authorization": f"Bearer {token}",
        "mcp-session-id": session_id,
        "mcp-protocol-version": "2025-11-25",
    }


PING = {"jsonrpc": "2.0", "id": 9, "method": "ping"}


async def test_at_the_cap_the_least_recently_used_session_makes_room(door: DoorLive) -> None:
    task = await door.live.create_task()
    other = await door.live.create_task(actor="user_9")
    token = task["tokens"]["agent"]
    opened = [await post_initialize(door, token) for _ in range(16)]
    assert all(r.status_code == 200 for r in opened)
    ids = [r.headers["mcp-session-id"] for r in opened]
    # The first one is used again: the second is now the least recently used.
    used = await door.live.http.post("/v1/mcp", json=PING, headers=_on_session(token, ids[0]))
    assert used.status_code == 200
    newcomer = await post_initialize(door, token)
    assert newcomer.status_code == 200  # never a lock-out
    mcp = door.live.gateway.services.get(McpDoor)
    assert len(mcp.sessions.open_for(task["task_id"])) == 16
    gone = await door.live.http.post("/v1/mcp", json=PING, headers=_on_session(token, ids[1]))
    assert gone.status_code == 404  # the protocol's signal to initialize again
    kept = await door.live.http.post("/v1/mcp", json=PING, headers=_on_session(token, ids[0]))
    assert kept.status_code == 200
    # Another task is not affected.
    assert (await post_initialize(door, other["tokens"]["agent"])).status_code == 200


async def test_a_session_with_a_call_in_flight_is_never_closed_to_make_room(
    door: DoorLive,
) -> None:
    task = await door.live.create_task()
    token = task["tokens"]["agent"]
    async with door.client(token, mode="legacy") as busy:
        call = asyncio.create_task(busy.call_tool("test.wait_ui", {}))
        await asyncio.wait_for(door.probe.started.wait(), 10)
        # 15 more, then 5 past the cap: each closes an idle one, never the busy one.
        for _ in range(20):
            assert (await post_initialize(door, token)).status_code == 200
        door.probe.ui_reply.set()
        result = await asyncio.wait_for(call, 10)
        assert result.structured_content["status"] == "succeeded"
    mcp = door.live.gateway.services.get(McpDoor)
    assert mcp.sessions.evicted >= 5


async def test_the_session_cap_holds_under_a_burst_of_handshakes(door: DoorLive) -> None:
    task = await door.live.create_task()
    answers = await asyncio.gather(
        *(post_initialize(door, task["tokens"]["agent"]) for _ in range(48))
    )
    statuses = [a.status_code for a in answers]
    # Handshakes under way count against the cap; an answered one that is idle makes room.
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(200) >= 16, statuses
    mcp = door.live.gateway.services.get(McpDoor)
    assert len(mcp.sessions.open_for(task["task_id"])) <= 16


async def test_an_oversized_request_is_refused_unread(door: DoorLive) -> None:
    task = await door.live.create_task()
    limit = door.live.gateway.settings.max_body_bytes
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "test.noop", "arguments": {"pad": "x" * limit}},
    }
    response = await door.live.http.post(
        "/v1/mcp",
        json=body,
        headers={
            **MCP_HEADERS,
            "authorization": f"Bearer {task['tokens']['agent']}",
            "mcp-protocol-version": "2026-07-28",
        },
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"] == []


async def test_another_tasks_token_on_a_session_neither_uses_nor_untracks_it(
    door: DoorLive,
) -> None:
    a = await door.live.create_task()
    b = await door.live.create_task(actor="user_9")
    opened = [await post_initialize(door, a["tokens"]["agent"]) for _ in range(16)]
    ids = [r.headers["mcp-session-id"] for r in opened]
    mcp = door.live.gateway.services.get(McpDoor)
    for session_id in ids:
        foreign = await door.live.http.post(
            "/v1/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
            headers={
                **MCP_HEADERS,
                "authorization": f"Bearer {b['tokens']['agent']}",
                "mcp-session-id": session_id,
                "mcp-protocol-version": "2025-11-25",
            },
        )
        assert foreign.status_code == 404
    # Still A's, still counted: a 17th makes room by closing one of them (the cap holds),
    # and ending A closes every one it holds.
    assert mcp.sessions.open_for(a["task_id"]) == sorted(ids)
    seventeenth = await post_initialize(door, a["tokens"]["agent"])
    assert seventeenth.status_code == 200
    held = mcp.sessions.open_for(a["task_id"])
    assert len(held) == 16 and seventeenth.headers["mcp-session-id"] in held
    await door.live.end_task(a["task_id"])
    assert mcp.sessions.open_for(a["task_id"]) == []
    assert not {*ids, *held} & set(mcp.manager._server_instances)
