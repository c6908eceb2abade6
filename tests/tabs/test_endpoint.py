"""WS /v1/tabs over real loopback websockets: handshake rules, reply rules, lifecycle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from gateway.core.results import Door, ToolStatus
from gateway.core.tokens import Purpose
from gateway.tabs import ReadView, ShowRunProgress
from tests.tabs.conftest import DASHBOARD, TabGateway, open_tab

Factory = Callable[..., Any]


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:8766", None])
async def test_foreign_or_missing_origin_is_refused_at_the_handshake(
    tab_gateway: TabGateway, origin: str | None
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with open_tab(tab_gateway.ws_url, origin):
            pass
    assert refused.value.response.status_code == 403
    assert await tab_gateway.metric("gateway_tab_handshakes_refused_total", reason="origin") >= 1


async def test_hello_welcomes_with_catalog_views_and_heartbeat(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task(scopes=["ui"])
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        welcome = await tab.hello(task["tokens"]["tab"])
    assert welcome["type"] == "welcome"
    assert welcome["task_id"] == task["task_id"]
    assert [t["tool_id"] for t in welcome["tools"]] == [
        "ui.display_proposed_change",
        "ui.open_view",
        "ui.populate_draft",
        "ui.read_view",
        "ui.show_run_progress",
    ]
    assert [v["name"] for v in welcome["views"]] == ["agent_builder", "run_report"]
    assert welcome["heartbeat_s"] > 0


async def test_catalog_follows_the_identity(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task(scopes=["workspace:read"])
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        welcome = await tab.hello(task["tokens"]["tab"])
    assert welcome["tools"] == []


async def test_token_in_the_url_is_ignored(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    token = task["tokens"]["tab"]
    async with raw_tab_factory(f"{tab_gateway.ws_url}?token={token}") as tab:
        await tab.send({"type": "hello", "token": "x", "tab_id": "tab_1"})
        error = await tab.recv()
        assert (error["type"], error["code"]) == ("error", "invalid_token")
        assert await tab.closed_with() == 1008


async def test_no_hello_in_time_is_closed(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    async with raw_tab_factory(f"{tab_gateway.ws_url}?token={task['tokens']['tab']}") as tab:
        assert (await tab.recv())["code"] == "invalid_frame"
        assert await tab.closed_with() == 1008


@pytest.mark.parametrize("purpose", ["agent", "bridge"])
async def test_other_purpose_tokens_are_refused(
    tab_gateway: TabGateway, raw_tab_factory: Factory, purpose: str
) -> None:
    task = await tab_gateway.create_task()
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        error = await tab.hello(task["tokens"][purpose])
        assert error["code"] == "invalid_token"
        assert await tab.closed_with() == 1008


async def test_expired_and_revoked_tokens_are_refused(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    expired, _ = tab_gateway.gw.tokens.mint(task["task_id"], Purpose.TAB, -5)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        error = await tab.hello(expired)
        assert error["code"] == "invalid_token"
        assert "expired" in error["message"]
        assert await tab.closed_with() == 1008
    await tab_gateway.end_task(task["task_id"])
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        assert (await tab.hello(task["tokens"]["tab"]))["code"] == "revoked"
        assert await tab.closed_with() == 1008


async def test_request_reply_round_trip_and_task_probe(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"], revision=3)
        sent = asyncio.create_task(tab_gateway.hub.send(identity, ShowRunProgress(run_id="run_1")))
        request = await tab.recv()
        assert request["action"] == {"type": "show_run_progress", "run_id": "run_1"}
        assert request["revision"] == 3
        probe = (
            await tab_gateway.http.get(f"/v1/tasks/{task['task_id']}", headers=tab_gateway.control)
        ).json()["tab"]
        assert probe["connected"] and probe["pending_requests"] == 1 and probe["revision"] == 3
        await tab.send(
            {
                "type": "reply",
                "id": request["id"],
                "task_id": task["task_id"],
                "tab_id": "tab_1",
                "revision": 3,
                "ok": True,
                "result": {"shown": "run_1"},
            }
        )
        outcome = await sent
    assert outcome.ok and outcome.result == {"shown": "run_1"}


async def test_forged_reply_is_rejected_counted_and_recorded(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    a = await tab_gateway.create_task(org="org_a")
    b = await tab_gateway.create_task(org="org_b")
    identity_a = await tab_gateway.gw.tasks.authenticate(a["tokens"]["tab"], Purpose.TAB)
    async with (
        raw_tab_factory(tab_gateway.ws_url) as tab_a,
        raw_tab_factory(tab_gateway.ws_url) as tab_b,
    ):
        await tab_a.hello(a["tokens"]["tab"], tab_id="tab_a")
        await tab_b.hello(b["tokens"]["tab"], tab_id="tab_b")
        sent = asyncio.create_task(tab_gateway.hub.send(identity_a, ReadView()))
        request = await tab_a.recv()
        forged = {
            "type": "reply",
            "id": request["id"],
            "task_id": a["task_id"],
            "tab_id": "tab_a",
            "revision": 1,
            "ok": True,
            "result": {"view": "forged"},
        }
        await tab_b.send(forged)
        error = await tab_b.recv()
        assert (error["type"], error["code"], error["id"]) == (
            "error",
            "unknown_request",
            request["id"],
        )
        assert not sent.done()
        await tab_a.send({**forged, "result": {"view": "real"}})
        outcome = await sent
    assert outcome.result == {"view": "real"}
    assert (
        await tab_gateway.metric("gateway_tab_frames_rejected_total", reason="unknown_request") == 1
    )
    [record] = await tab_gateway.evidence(b["task_id"], "tab.frame_rejected", wait_for=1)
    assert record["data"]["reason"] == "unknown_request"
    assert record["data"]["claimed_task_id"] == a["task_id"]
    assert await tab_gateway.evidence(a["task_id"], "tab.frame_rejected") == []


async def test_oversized_frame_closes_1009(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        await tab.send(json.dumps({"type": "state", "revision": 2, "view": {"x": "y" * 70_000}}))
        assert await tab.closed_with() == 1009


async def test_repeated_malformed_frames_close_1008(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        for _ in range(3):
            await tab.send("{nope")
            assert (await tab.recv())["code"] == "invalid_frame"
        await tab.send("{nope")
        assert await tab.closed_with() == 1008


async def test_second_tab_supersedes_the_first(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    async with raw_tab_factory(tab_gateway.ws_url) as first:
        await first.hello(task["tokens"]["tab"], tab_id="tab_1")
        pending = asyncio.create_task(tab_gateway.hub.send(identity, ReadView()))
        await first.recv()
        async with raw_tab_factory(tab_gateway.ws_url) as second:
            await second.hello(task["tokens"]["tab"], tab_id="tab_2")
            assert await first.recv() == {"type": "bye", "reason": "superseded"}
            assert await first.closed_with() == 4001
            outcome = await pending
            assert outcome.error is not None and outcome.error.code == "tab_unavailable"
            sent = asyncio.create_task(tab_gateway.hub.send(identity, ReadView()))
            request = await second.recv()
            await second.send(
                {
                    "type": "reply",
                    "id": request["id"],
                    "task_id": task["task_id"],
                    "tab_id": "tab_2",
                    "revision": 1,
                    "ok": True,
                    "result": {},
                }
            )
            assert (await sent).ok


async def test_task_end_closes_4002_and_fails_pending(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        pending = asyncio.create_task(tab_gateway.hub.send(identity, ReadView()))
        await tab.recv()
        await tab_gateway.end_task(task["task_id"])
        assert await tab.recv() == {"type": "bye", "reason": "task_ended"}
        assert await tab.closed_with() == 4002
    outcome = await pending
    assert outcome.status is ToolStatus.UNAVAILABLE
    assert outcome.error is not None and not outcome.error.retryable


async def test_token_expiry_closes_4003(tab_gateway: TabGateway, raw_tab_factory: Factory) -> None:
    task = await tab_gateway.create_task()
    short, _ = tab_gateway.gw.tokens.mint(task["task_id"], Purpose.TAB, 3)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        assert (await tab.hello(short))["type"] == "welcome"
        assert await tab.recv(within=5) == {"type": "bye", "reason": "token_expired"}
        assert await tab.closed_with() == 4003


async def test_tab_tool_calls_run_through_the_pipeline(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task(scopes=["ui"])
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        await tab.send({"type": "tool_call", "id": "k1", "tool": "nope.tool", "input": {}})
        denied = await tab.recv()
        assert (denied["type"], denied["id"], denied["status"]) == ("tool_result", "k1", "denied")
        assert denied["error"]["code"] == "unknown_tool"
        # A page calling ui.read_view asks itself; cancel it from the page.
        await tab.send({"type": "tool_call", "id": "k2", "tool": "ui.read_view", "via": "webmcp"})
        request = await tab.recv()
        assert request["type"] == "request"
        await tab.send({"type": "cancel", "id": "k2"})
        frames = [await tab.recv(), await tab.recv()]
        by_type = {f["type"]: f for f in frames}
        assert by_type["cancel"]["id"] == request["id"]
        assert by_type["tool_result"]["status"] == "failed"
        assert by_type["tool_result"]["error"]["code"] == "cancelled"
    calls = await tab_gateway.evidence(task["task_id"], "call")
    doors = sorted(c["door"] for c in calls)
    assert doors == [Door.TAB.value, Door.WEBMCP.value]


async def test_cancelled_handler_sends_cancel_to_the_tab(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        waiting = asyncio.create_task(tab_gateway.hub.send(identity, ReadView()))
        request = await tab.recv()
        waiting.cancel()
        assert await tab.recv() == {"type": "cancel", "id": request["id"], "reason": "cancelled"}


async def test_timeout_reaches_the_tab(tab_gateway: TabGateway, raw_tab_factory: Factory) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    async with raw_tab_factory(tab_gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        waiting = asyncio.create_task(tab_gateway.hub.send(identity, ReadView(), timeout_s=0.3))
        request = await tab.recv()
        assert await tab.recv() == {"type": "cancel", "id": request["id"], "reason": "timeout"}
        outcome = await waiting
    assert outcome.status is ToolStatus.TIMEOUT


async def test_no_tab_is_tab_unavailable_through_the_ui_tool(tab_gateway: TabGateway) -> None:
    task = await tab_gateway.create_task()
    identity = await tab_gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    result = await tab_gateway.gw.pipeline.call(identity, "ui.read_view", {}, door=Door.MCP)
    assert result.status is ToolStatus.UNAVAILABLE
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("tab_unavailable", True)
    # Nothing is kept for a task whose tab never came.
    assert identity.task_id not in tab_gateway.hub._channels
    bad = await tab_gateway.gw.pipeline.call(
        identity, "ui.open_view", {"view": "admin", "params": {}}, door=Door.MCP
    )
    assert bad.error is not None and bad.error.code == "invalid_input"


async def test_shim_is_served_with_cors_for_dashboards_only(tab_gateway: TabGateway) -> None:
    source = (Path(__file__).parents[2] / "webmcp_js" / "webmcp.js").read_bytes()
    ok = await tab_gateway.http.get("/webmcp.js", headers={"origin": DASHBOARD})
    assert ok.status_code == 200
    assert ok.content == source
    assert ok.headers["content-type"].startswith("text/javascript")
    assert ok.headers["access-control-allow-origin"] == DASHBOARD
    foreign = await tab_gateway.http.get("/webmcp.js", headers={"origin": "http://evil.example"})
    assert "access-control-allow-origin" not in foreign.headers
    types = await tab_gateway.http.get("/webmcp.d.ts")
    assert b"connectGateway" in types.content
