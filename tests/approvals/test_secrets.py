"""Secrets in approvals, tried from the attacker's side over a real loopback server: what
a request shows and stores is redacted once, on evidence's rules, before anyone sees it; a
secret fill refused at approval keeps no value in evidence; and a task's approvals are read
only by those who may answer them (the control plane, the task's tab), not by its agent or
bridge tokens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.identity import TaskIdentity
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ToolResult
from gateway.core.tokens import Purpose
from gateway.settings import Settings
from tests.approvals.test_http import DECISION, bearer, setup
from tests.conftest import Live, LiveFactory

PASSWORD = "correct-horse-battery-staple-41"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
REF = "s1.e4"


class Paste(BaseModel):
    text: str


def with_asking_tool(gw: Any) -> None:
    setup(gw)

    async def paste(ctx: ToolContext, args: Paste) -> dict[str, str]:
        await ctx.request_approval(
            f"Paste {args.text} into the form", {"text": args.text, "api_key": PASSWORD}
        )
        return {"pasted": str(len(args.text))}

    gw.registry.add(Tool("notes.paste", "Paste", "Pastes", Paste, paste, scopes=frozenset()))


@pytest.fixture
async def live(live_factory: LiveFactory, settings: Settings) -> AsyncIterator[Live]:
    async with live_factory(settings, setup=with_asking_tool) as running:
        yield running


POLICY = {
    "grantable": [
        {"tool": "notes.write", "by": "control"},
        {"tool": "browser.fill"},
        {"tool": "browser.fill_form"},
    ],
    "channels": ["tab", "control"],
}


async def task_of(live: Live) -> tuple[dict[str, Any], TaskIdentity]:
    body = await live.create_task(scopes=["ui"], approvals=POLICY)
    ident = await live.gateway.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
    return body, ident


def calling(live: Live, ident: TaskIdentity, tool: str, args: Any) -> asyncio.Task[ToolResult]:
    return asyncio.ensure_future(live.gateway.pipeline.call(ident, tool, args, door=Door.MCP))


async def pending(live: Live, task_id: str) -> Any:
    for _ in range(300):
        found = live.gateway.approvals.pending(task_id)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("nothing was asked")


async def listed(live: Live, task_id: str) -> str:
    answer = await live.http.get(f"/v1/tasks/{task_id}/approvals", headers=live.control)
    assert answer.status_code == 200, answer.text
    return answer.text


async def test_a_secret_fill_shows_no_value_and_refused_keeps_none_in_evidence(
    live: Live,
) -> None:
    body, ident = await task_of(live)
    args = {"ref": REF, "value": PASSWORD, "secret": True}
    call = calling(live, ident, "browser.fill", args)
    request = await pending(live, ident.task_id)
    # What the person is shown, what the tab is sent, and what is stored: no value.
    assert PASSWORD not in request.summary
    assert PASSWORD not in json.dumps(request.shown())
    assert f"[secret: {len(PASSWORD)} chars]" in request.summary
    assert PASSWORD not in await listed(live, ident.task_id)
    url = f"/v1/tasks/{ident.task_id}/approvals/{request.id}"
    deny = {**DECISION, "decision": "deny"}
    assert (await live.http.post(url, json=deny, headers=live.control)).status_code == 200
    result = await call
    assert result.error is not None and result.error.code == "approval_denied"
    evidence = await live.http.get(f"/v1/tasks/{ident.task_id}/evidence", headers=live.control)
    assert PASSWORD not in evidence.text
    [record] = [r for r in evidence.json()["records"] if r["kind"] == "call"]
    assert record["input"]["value"] == f"[secret: {len(PASSWORD)} chars]"
    # Nowhere in the database either.
    assert PASSWORD not in await _everything_stored(live)
    assert body


async def test_a_secret_field_of_a_form_shows_no_value_either(live: Live) -> None:
    _, ident = await task_of(live)
    fields = [{"ref": REF, "value": "ada"}, {"ref": "s1.e5", "value": PASSWORD, "secret": True}]
    call = calling(live, ident, "browser.fill_form", {"fields": fields})
    request = await pending(live, ident.task_id)
    assert PASSWORD not in request.summary
    assert PASSWORD not in json.dumps(request.shown())
    assert PASSWORD not in await listed(live, ident.task_id)
    url = f"/v1/tasks/{ident.task_id}/approvals/{request.id}"
    deny = {**DECISION, "decision": "deny"}
    assert (await live.http.post(url, json=deny, headers=live.control)).status_code == 200
    assert (await call).error is not None
    assert PASSWORD not in await _everything_stored(live)


async def test_a_pasted_token_and_a_tools_own_secret_details_are_redacted(live: Live) -> None:
    _, ident = await task_of(live)
    gate = calling(live, ident, "notes.write", {"text": f"use {GITHUB_TOKEN} please"})
    request = await pending(live, ident.task_id)
    assert GITHUB_TOKEN not in request.summary
    ask = calling(live, ident, "notes.paste", {"text": f"token {GITHUB_TOKEN}"})
    for _ in range(300):
        if len(live.gateway.approvals.pending(ident.task_id)) == 2:
            break
        await asyncio.sleep(0.01)
    [own] = [r for r in live.gateway.approvals.pending(ident.task_id) if r.tool == "notes.paste"]
    assert own.details["api_key"] == "[redacted]"
    text = await listed(live, ident.task_id)
    for secret in (GITHUB_TOKEN, PASSWORD):
        assert secret not in text
        assert secret not in json.dumps(own.shown())
        assert secret not in await _everything_stored(live)
    await live.end_task(ident.task_id)
    await asyncio.gather(gate, ask)


async def test_only_the_parties_that_answer_read_a_tasks_approvals(live: Live) -> None:
    body, ident = await task_of(live)
    call = calling(live, ident, "notes.write", {"text": "hi"})
    await pending(live, ident.task_id)
    url = f"/v1/tasks/{ident.task_id}/approvals"
    tokens = body["tokens"]
    tab = await live.http.get(url, headers=bearer(tokens["tab"]))
    assert tab.status_code == 200
    assert len(tab.json()["approvals"]) == 1
    for purpose in ("agent", "bridge"):
        refused = await live.http.get(url, headers=bearer(tokens[purpose]))
        assert refused.status_code == 403, (purpose, refused.text)
        assert refused.json()["error"]["code"] == "forbidden"
        assert "approval_id" not in refused.text
    await live.end_task(ident.task_id)
    await call


async def _everything_stored(live: Live) -> str:
    """Every row of the store's approval and evidence tables, as text."""
    from sqlalchemy import select

    from gateway.core.store import schema

    out = []
    async with live.gateway.store.engine.connect() as conn:
        for table in (schema.approvals, schema.evidence):
            out += [repr(tuple(row)) for row in (await conn.execute(select(table))).all()]
    return "\n".join(out)
