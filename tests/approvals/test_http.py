"""`/v1/tasks/{id}/approvals` over a real loopback server, from every side: the control
plane decides, the task's tab reads, everyone else finds nothing or is refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.testing import task_body
from tests.conftest import Live, LiveFactory

POLICY = {"grantable": [{"tool": "notes.write", "by": "control"}]}
DECISION = {"decision": "approve", "approver": {"id": "admin_1", "role": "admin"}}


class Note(BaseModel):
    text: str


def setup(gw: Gateway) -> None:
    async def write(_ctx: ToolContext, args: Note) -> dict[str, str]:
        return {"wrote": args.text}

    gw.registry.add(
        Tool("notes.write", "Write a note", "Writes", Note, write, scopes=frozenset({"notes:w"}))
    )


@pytest.fixture
async def live(live_factory: LiveFactory, settings: Settings) -> AsyncIterator[Live]:
    async with live_factory(settings, setup=setup) as running:
        yield running


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def waiting(live: Live, **task: Any) -> tuple[dict[str, Any], asyncio.Task[Any], str]:
    """A task whose call of notes.write waits for the control plane."""
    body = await live.create_task(scopes=["ui"], approvals=POLICY, **task)
    ident = await live.gateway.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
    call = asyncio.ensure_future(
        live.gateway.pipeline.call(ident, "notes.write", {"text": "hi"}, door=Door.BRIDGE)
    )
    for _ in range(200):
        pending = live.gateway.approvals.pending(body["task_id"])
        if pending:
            return body, call, pending[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("the call did not ask")


async def test_the_control_plane_approves_and_the_call_runs(live: Live) -> None:
    task, call, approval_id = await waiting(live)
    url = f"/v1/tasks/{task['task_id']}/approvals"
    listed = (await live.http.get(url, headers=live.control)).json()
    assert [a["status"] for a in listed["approvals"]] == ["pending"]
    assert "nonce" not in str(listed)
    answer = await live.http.post(f"{url}/{approval_id}", json=DECISION, headers=live.control)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "approved"
    assert (await call).output == {"wrote": "hi"}
    again = await live.http.post(f"{url}/{approval_id}", json=DECISION, headers=live.control)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


async def test_the_tab_reads_the_agent_and_bridge_do_not_and_no_token_decides(
    live: Live,
) -> None:
    task, call, approval_id = await waiting(live)
    url = f"/v1/tasks/{task['task_id']}/approvals"
    for purpose, token in task["tokens"].items():
        read = await live.http.get(url, headers=bearer(token))
        if purpose == "tab":
            assert read.status_code == 200
            assert read.json()["approvals"][0]["approval_id"] == approval_id
        else:
            assert read.status_code == 403, purpose
        decided = await live.http.post(f"{url}/{approval_id}", json=DECISION, headers=bearer(token))
        assert decided.status_code == 401
    assert not call.done()
    await live.end_task(task["task_id"])
    assert (await call).error.code == "cancelled"


async def test_another_task_or_organization_finds_nothing(live: Live) -> None:
    task, call, approval_id = await waiting(live)
    other = await live.create_task(org="org_b", scopes=["ui"])
    url = f"/v1/tasks/{task['task_id']}/approvals"
    read = await live.http.get(url, headers=bearer(other["tokens"]["agent"]))
    assert read.status_code == 404
    # The control plane names the approval under the wrong task: nothing to decide there.
    wrong = f"/v1/tasks/{other['task_id']}/approvals/{approval_id}"
    assert (await live.http.post(wrong, json=DECISION, headers=live.control)).status_code == 404
    unknown = f"{url}/apr_nope"
    assert (await live.http.post(unknown, json=DECISION, headers=live.control)).status_code == 404
    assert not call.done()
    await live.end_task(task["task_id"])
    await call


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"decision": "yes", "approver": {"id": "a", "role": "admin"}},
        {"decision": "approve"},
        {**DECISION, "scope": "forever"},
        {**DECISION, "approver": {"id": "bad id!", "role": "admin"}},
        {**DECISION, "extra": 1},
        {**DECISION, "message": "x" * 1001},
    ],
)
async def test_a_malformed_decision_is_422_and_decides_nothing(
    live: Live, body: dict[str, Any]
) -> None:
    task, call, approval_id = await waiting(live)
    url = f"/v1/tasks/{task['task_id']}/approvals/{approval_id}"
    answer = await live.http.post(url, json=body, headers=live.control)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_input"
    assert live.gateway.approvals.pending(task["task_id"])
    await live.end_task(task["task_id"])
    await call


async def test_grants_for_the_task_show_in_the_task(live: Live) -> None:
    task, call, approval_id = await waiting(live)
    url = f"/v1/tasks/{task['task_id']}/approvals/{approval_id}"
    body = {**DECISION, "scope": "task"}
    assert (await live.http.post(url, json=body, headers=live.control)).status_code == 200
    await call
    read = (await live.http.get(f"/v1/tasks/{task['task_id']}", headers=live.control)).json()
    assert read["grants"]["notes.write"]["by"] == {"id": "admin_1", "role": "admin"}
    assert read["approvals"]["grantable"][0]["tool"] == "notes.write"


async def test_a_bad_policy_at_creation_is_422(live: Live) -> None:
    body = task_body(approvals={"channels": ["tab"], "grantable": [{"tool": "a", "by": "control"}]})
    answer = await live.http.post("/v1/tasks", json=body, headers=live.control)
    assert answer.status_code == 422
