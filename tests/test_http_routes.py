"""The HTTP surface over a real loopback server: status codes, bodies, owners."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.conftest import Live, LiveFactory, task_body


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_create_requires_the_control_key(live: Live) -> None:
    missing = await live.http.post("/v1/tasks", json=task_body())
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_token"
    wrong = await live.http.post("/v1/tasks", json=task_body(), headers=bearer("nope" * 8))
    assert wrong.status_code == 401


async def test_an_agent_token_cannot_create_or_end_tasks(live: Live) -> None:
    task = await live.create_task()
    agent = bearer(task["tokens"]["agent"])
    assert (await live.http.post("/v1/tasks", json=task_body(), headers=agent)).status_code == 401
    deleted = await live.http.delete(f"/v1/tasks/{task['task_id']}", headers=agent)
    assert deleted.status_code == 401


async def test_create_answers_201_with_three_distinct_tokens(live: Live) -> None:
    task = await live.create_task(ttl_s=120)
    assert set(task["tokens"]) == {"tab", "agent", "bridge"}
    assert len(set(task["tokens"].values())) == 3
    assert task["task_id"].startswith("task_")


@pytest.mark.parametrize(
    "body",
    [
        {},
        task_body(org="bad org!"),
        task_body(app_origin="javascript:alert(1)"),
        task_body(app_origin="http://user@127.0.0.1:9"),
        task_body(allowed_origins=["http://0x7f.1:80"]),
        task_body(allowed_tools=["bad name with spaces"]),
        {**task_body(), "unexpected": 1},
        {**task_body(), "ttl_s": 0},
    ],
)
async def test_bad_task_requests_are_422_with_field_errors(live: Live, body: Any) -> None:
    response = await live.http.post("/v1/tasks", json=body, headers=live.control)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["details"]["errors"]


async def test_malformed_and_oversized_bodies(live: Live) -> None:
    bad = await live.http.post(
        "/v1/tasks",
        content=b"{not json",
        headers={**live.control, "content-type": "application/json"},
    )
    assert bad.status_code == 422
    huge = await live.http.post("/v1/tasks", content=b"[" * (2 * 1024 * 1024), headers=live.control)
    assert huge.status_code == 413
    assert huge.json()["error"]["code"] == "payload_too_large"


async def test_ttl_is_capped_by_the_gateway(live: Live) -> None:
    from datetime import datetime

    task = await live.create_task(ttl_s=10**6)
    got = await live.http.get(f"/v1/tasks/{task['task_id']}", headers=live.control)
    body = got.json()
    created = datetime.fromisoformat(body["created_at"])
    expires = datetime.fromisoformat(body["expires_at"])
    assert (expires - created).total_seconds() == live.gateway.settings.max_task_ttl_s


async def test_delete_is_idempotent_and_unknown_tasks_are_404(live: Live) -> None:
    task = await live.create_task()
    first = await live.http.delete(f"/v1/tasks/{task['task_id']}", headers=live.control)
    second = await live.http.delete(f"/v1/tasks/{task['task_id']}", headers=live.control)
    assert (first.json()["changed"], second.json()["changed"]) == (True, False)
    assert second.json()["status"] == "ended"
    missing = await live.http.delete("/v1/tasks/task_nope", headers=live.control)
    assert missing.status_code == 404


class Note(BaseModel):
    text: str


def with_tools(gw: Gateway) -> None:
    async def note(ctx: ToolContext, args: Note) -> dict[str, Any]:
        ref = await gw.store.put_artifact(
            ctx.identity, args.text.encode(), name="note.txt", media_type="text/plain"
        )
        return ref.public()

    gw.registry.add(Tool("t.note", "Note", "Store a note", Note, note, scopes=frozenset({"ui"})))
    gw.registry.add(
        Tool(
            "t.admin",
            "Admin",
            "Admins only",
            Note,
            note,
            scopes=frozenset({"ui"}),
            roles=frozenset({"admin"}),
        )
    )


async def test_cross_owner_reads_are_404(settings: Settings, live_factory: LiveFactory) -> None:
    async with live_factory(settings, setup=with_tools) as live:
        a = await live.create_task(org="org_a")
        b = await live.create_task(org="org_b")
        ident_a = await live.gateway.tasks.authenticate(a["tokens"]["agent"], _agent())
        result = await live.gateway.pipeline.call(ident_a, "t.note", {"text": "A's"}, door=Door.MCP)
        artifact_id = result.output["artifact_id"]
        as_b = bearer(b["tokens"]["agent"])
        for path in (
            f"/v1/tasks/{a['task_id']}",
            f"/v1/tasks/{a['task_id']}/evidence",
            f"/v1/artifacts/{artifact_id}",
        ):
            response = await live.http.get(path, headers=as_b)
            assert response.status_code == 404, path
            assert "A's" not in response.text
        # A's own agent and the control plane can read all three.
        for headers in (bearer(a["tokens"]["agent"]), live.control):
            art = await live.http.get(f"/v1/artifacts/{artifact_id}", headers=headers)
            assert art.content == b"A's"
            assert art.headers["x-content-sha256"] == result.output["sha256"]
            ev = await live.http.get(f"/v1/tasks/{a['task_id']}/evidence", headers=headers)
            assert [r["tool"] for r in ev.json()["records"]] == ["t.note"]


async def test_tab_and_bridge_tokens_cannot_read_evidence(live: Live) -> None:
    task = await live.create_task()
    for purpose in ("tab", "bridge"):
        response = await live.http.get(
            f"/v1/tasks/{task['task_id']}/evidence", headers=bearer(task["tokens"][purpose])
        )
        assert response.status_code == 401


async def test_status_shows_call_counts(settings: Settings, live_factory: LiveFactory) -> None:
    async with live_factory(settings, setup=with_tools) as live:
        task = await live.create_task(role="member")
        ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], _agent())
        await live.gateway.pipeline.call(ident, "t.note", {"text": "x"}, door=Door.MCP)
        await live.gateway.pipeline.call(ident, "t.admin", {"text": "x"}, door=Door.MCP)
        status = await live.http.get(
            f"/v1/tasks/{task['task_id']}", headers=bearer(task["tokens"]["agent"])
        )
        assert status.json()["calls"] == {"succeeded": 1, "denied": 1}


async def test_health_and_metrics(settings: Settings, live_factory: LiveFactory) -> None:
    async with live_factory(settings, setup=with_tools) as live:
        assert (await live.http.get("/healthz")).json()["status"] == "ok"
        task = await live.create_task()
        ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], _agent())
        await live.gateway.pipeline.call(ident, "t.note", {"text": "x"}, door=Door.MCP)
        await live.http.get("/v1/tasks/x", headers=bearer("forged"))
        text = (await live.http.get("/metrics")).text
        assert 'gateway_tool_calls_total{door="mcp",status="succeeded",tool="t.note"} 1.0' in text
        assert "gateway_active_tasks 1.0" in text
        assert 'gateway_auth_failures_total{code="invalid_token",purpose="agent"} 1.0' in text
        assert "gateway_tool_call_seconds_bucket" in text


def _agent() -> Any:
    from gateway.core.tokens import Purpose

    return Purpose.AGENT
