"""The host dispatcher `POST /v1/parent-tools`, tried from a hostile sandbox's side."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.bridge import ParentToolResult, load_bridge, sandbox_env_values
from gateway.bridge.schemas import TOKEN_ENV
from tests.bridge.conftest import ALLOWED, SCOPES, BridgeSetup, fixture
from tests.conftest import Live

PATH = "/v1/parent-tools"


def request(tool: str = "test.echo", **fields: Any) -> dict[str, Any]:
    body = fixture("request_succeeded.json")
    body["tool"] = tool
    body.update(fields)
    return body


async def post(bridge: BridgeSetup, body: Any, token: str | None = None) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token or bridge.task['tokens']['bridge']}"}
    response = await bridge.live.http.post(PATH, json=body, headers=headers)
    return response.status_code, response.json()


# -- the envelope handed to the task -----------------------------------------------------


async def test_the_task_answer_carries_a_bridge_envelope_without_any_token(
    bridge: BridgeSetup,
) -> None:
    raw = bridge.task["parent_tool_bridge"]
    envelope = load_bridge(raw)
    assert envelope.allowed_tools == [
        "test.boom",
        "test.count",
        "test.down",
        "test.echo",
        "test.slow",
        "workspace.edit",
        "workspace.read",
        "workspace.search",
        "workspace.write",
    ]
    assert envelope.dispatcher.mode == "host_endpoint"
    assert envelope.dispatcher.endpoint is not None
    assert envelope.dispatcher.endpoint.url_env == "WP_CODEBOX_PARENT_TOOL_ENDPOINT"
    assert envelope.dispatcher.endpoint.token_env == "WP_CODEBOX_PARENT_TOOL_TOKEN"
    assert envelope.sandbox_env.secret_env == []
    assert envelope.metadata["endpoint_url"].endswith("/v1/parent-tools")
    text = json.dumps(raw)
    for token in bridge.task["tokens"].values():
        assert token not in text
    # The control plane pairs the token with the envelope only in the sandbox's env.
    env = sandbox_env_values(envelope, bridge.task["tokens"]["bridge"])
    assert env[TOKEN_ENV] == bridge.task["tokens"]["bridge"]
    assert env["WP_CODEBOX_PARENT_TOOL_DISPATCH_MODE"] == "host_endpoint"


async def test_the_allowlist_is_resolved_against_scopes(bridge: BridgeSetup) -> None:
    # Patterns allow workspace.* but the scopes grant only reading.
    task = await bridge.live.create_task(
        scopes=["test", "workspace:read"], allowed_tools=["workspace.*", "test.echo", "nope.x"]
    )
    envelope = load_bridge(task["parent_tool_bridge"])
    assert envelope.allowed_tools == ["test.echo", "workspace.read", "workspace.search"]


async def test_a_tool_a_person_may_approve_is_listed_and_waits_for_the_approval(
    bridge: BridgeSetup,
) -> None:
    # test.count is outside the task's allowlist, but the control plane may grant it.
    approvals = {"grantable": [{"tool": "test.count", "by": "control"}], "channels": ["control"]}
    task = await bridge.live.create_task(
        scopes=["test"], allowed_tools=["test.echo"], approvals=approvals
    )
    envelope = load_bridge(task["parent_tool_bridge"])
    assert envelope.allowed_tools == ["test.count", "test.echo"]
    call = asyncio.ensure_future(post(bridge, request("test.count"), task["tokens"]["bridge"]))
    pending: list[dict[str, Any]] = []
    for _ in range(200):
        listed = await bridge.live.http.get(
            f"/v1/tasks/{task['task_id']}/approvals", headers=bridge.live.control
        )
        pending = [a for a in listed.json()["approvals"] if a["status"] == "pending"]
        if pending:
            break
        await asyncio.sleep(0.02)
    assert bridge.probe.runs["test.count"] == 0  # nothing ran before the answer
    decided = await bridge.live.http.post(
        f"/v1/tasks/{task['task_id']}/approvals/{pending[0]['approval_id']}",
        json={"decision": "approve", "approver": {"id": "ops_1", "role": "admin"}},
        headers=bridge.live.control,
    )
    assert decided.status_code == 200
    status, body = await call
    assert (status, body["status"]) == (200, "succeeded")
    assert bridge.probe.runs["test.count"] == 1


# -- authentication ------------------------------------------------------------------------


@pytest.mark.parametrize("purpose", ["agent", "tab"])
async def test_tokens_of_other_purposes_are_refused(bridge: BridgeSetup, purpose: str) -> None:
    status, body = await post(bridge, request(), bridge.task["tokens"][purpose])
    assert status == 401
    assert body["error"]["code"] == "invalid_token"
    assert body["status"] == "denied"
    assert bridge.probe.runs["test.echo"] == 0


async def test_no_token_and_a_forged_token_are_refused(bridge: BridgeSetup) -> None:
    response = await bridge.live.http.post(PATH, json=request())
    assert response.status_code == 401
    forged = bridge.task["tokens"]["bridge"][:-4] + "AAAA"
    status, _ = await post(bridge, request(), forged)
    assert status == 401
    assert bridge.probe.runs["test.echo"] == 0


async def test_an_ended_task_bridge_token_is_revoked(bridge: BridgeSetup) -> None:
    await bridge.live.end_task(bridge.task["task_id"])
    status, body = await post(bridge, request())
    assert status == 401
    assert body["error"]["code"] == "revoked"
    assert bridge.probe.runs["test.echo"] == 0


# -- envelope validation -----------------------------------------------------------------


def _broken() -> list[tuple[str, Any]]:
    good = request()
    cases: list[tuple[str, Any]] = [
        ("not an object", [good]),
        ("no schema", {k: v for k, v in good.items() if k != "schema"}),
        ("unknown schema", {**good, "schema": "wp-codebox/parent-tool-request/v9"}),
        ("other contract", {**good, "schema": "wp-codebox/tool-bridge/v1"}),
        ("version 2", {**good, "version": 2}),
        ("version as text", {**good, "version": "1"}),
        ("version as bool", {**good, "version": True}),
        ("no request id", {k: v for k, v in good.items() if k != "request_id"}),
        ("request id mistyped", {**good, "request_id": 123}),
        ("request id with spaces", {**good, "request_id": "a b"}),
        ("no tool", {k: v for k, v in good.items() if k != "tool"}),
        ("input is a list", {**good, "input": [1, 2]}),
        ("session is text", {**good, "sandbox_session": "s"}),
        ("unknown field", {**good, "token": "x"}),
        ("allowlist mistyped", {**good, "authorization": {"allowed_tools": "test.echo"}}),
    ]
    return cases


@pytest.mark.parametrize(("case", "body"), _broken(), ids=[c for c, _ in _broken()])
async def test_a_broken_envelope_is_a_structured_failure(
    bridge: BridgeSetup, case: str, body: Any
) -> None:
    status, answer = await post(bridge, body)
    assert status == 422, case
    result = ParentToolResult.model_validate(answer)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "invalid_input"
    assert "Traceback" not in json.dumps(answer)
    assert bridge.probe.runs["test.echo"] == 0


async def test_a_body_that_is_not_json_is_a_structured_failure(bridge: BridgeSetup) -> None:
    response = await bridge.live.http.post(
        PATH, content=b"{not json", headers=bridge.bridge_headers
    )
    assert response.status_code == 422
    assert ParentToolResult.model_validate(response.json()).status == "failed"


async def test_an_oversized_body_is_refused_before_it_is_read(bridge: BridgeSetup) -> None:
    big = request(input={"text": "x" * (bridge.gw.settings.max_body_bytes + 10)})
    status, answer = await post(bridge, big)
    assert status == 413
    assert answer["error"]["code"] == "payload_too_large"


# -- authorization ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "fields", "code"),
    [
        ("unknown tool", {"tool": "test.nothing"}, "unknown_tool"),
        ("registered, off the allowlist", {"tool": "test.secret"}, "forbidden"),
        ("another task's session", {"sandbox_session": {"task_id": "task_other"}}, "forbidden"),
        ("operation other than call", {"operation": "list"}, "forbidden"),
        ("unknown capability", {"authorization": {"capability": "admin"}}, "forbidden"),
        (
            "read capability for a side effect",
            {"tool": "test.count", "authorization": {"capability": "read"}},
            "forbidden",
        ),
        (
            "the request's own allowlist excludes it",
            {"authorization": {"allowed_tools": ["workspace.read"]}},
            "forbidden",
        ),
    ],
)
async def test_unauthorized_requests_are_denied_and_nothing_runs(
    bridge: BridgeSetup, case: str, fields: dict[str, Any], code: str
) -> None:
    status, answer = await post(bridge, request(**fields))
    assert status == 200, case
    result = ParentToolResult.model_validate(answer)
    assert result.status == "denied", case
    assert result.error is not None
    assert result.error.code == code
    assert sum(bridge.probe.runs.values()) == 0
    assert result.artifacts.transcripts, "a denied request still leaves a transcript"


async def test_claiming_a_tool_in_the_request_grants_nothing(bridge: BridgeSetup) -> None:
    body = request(
        "test.secret",
        authorization={
            "allowed_tools": ["test.secret"],
            "capability": "write",
            "principal": {"role": "admin", "scopes": ["*"]},
        },
    )
    _status, answer = await post(bridge, body)
    assert answer["status"] == "denied"
    assert bridge.probe.runs["test.secret"] == 0


async def test_a_task_with_a_narrow_allowlist_cannot_reach_other_tools(
    bridge: BridgeSetup,
) -> None:
    narrow = await bridge.live.create_task(scopes=SCOPES, allowed_tools=["workspace.read"])
    token = narrow["tokens"]["bridge"]
    for tool in [t for t in ALLOWED if not t.endswith("*")]:
        _status, answer = await post(bridge, request(tool), token)
        assert answer["status"] == "denied", tool
    assert sum(bridge.probe.runs.values()) == 0


# -- idempotency and evidence ------------------------------------------------------------


async def test_a_repeated_request_id_replays_a_side_effect(bridge: BridgeSetup) -> None:
    body = request("test.count", request_id="ptr_once", input={"text": "a"})
    _, first = await post(bridge, body)
    _, second = await post(bridge, body)
    assert first["status"] == second["status"] == "succeeded"
    assert first["output"] == second["output"] == {"count": 1, "text": "a"}
    assert bridge.probe.runs["test.count"] == 1
    assert second["diagnostics"]["replayed"] is True
    assert first["request_id"] == second["request_id"] == "ptr_once"
    _, third = await post(bridge, {**body, "request_id": "ptr_twice"})
    assert third["output"]["count"] == 2


async def test_a_request_id_reused_for_another_input_is_refused(bridge: BridgeSetup) -> None:
    body = request("test.count", request_id="ptr_reused", input={"text": "a"})
    _, first = await post(bridge, body)
    _, other = await post(bridge, {**body, "input": {"text": "b"}})
    assert first["status"] == "succeeded"
    assert other["status"] == "failed", other
    assert other["error"]["code"] == "conflict" and other["error"]["retryable"] is False
    assert "output" not in other or other["output"] is None
    assert bridge.probe.runs["test.count"] == 1  # the second input never ran


async def test_a_read_only_tool_runs_again_for_the_same_request_id(bridge: BridgeSetup) -> None:
    body = request("test.echo", request_id="ptr_same")
    await post(bridge, body)
    await post(bridge, body)
    assert bridge.probe.runs["test.echo"] == 2


async def test_calls_through_the_bridge_are_recorded_as_bridge_evidence(
    bridge: BridgeSetup,
) -> None:
    _, answer = await post(bridge, request("test.echo", request_id="ptr_ev"))
    records = await bridge.gw.store.evidence_for("org_a", bridge.task["task_id"])
    calls = [r for r in records if r.get("kind") == "call"]
    assert [(c["tool"], c["door"], c["status"]) for c in calls] == [
        ("test.echo", "bridge", "succeeded")
    ]
    assert answer["artifacts"]["evidence"] == [
        {"kind": "tool-call", "call_id": calls[0]["call_id"]}
    ]


async def test_a_default_gateway_offers_the_bridge_and_its_workspace_tools(live: Live) -> None:
    task = await live.create_task(scopes=["workspace:read"])
    envelope = load_bridge(task["parent_tool_bridge"])
    assert envelope.allowed_tools == ["workspace.read", "workspace.search"]
    body = {**fixture("request_seed.json"), "sandbox_session": {}, "input": {"path": "none.md"}}
    response = await live.http.post(
        PATH, json=body, headers={"authorization": f"Bearer {task['tokens']['bridge']}"}
    )
    answer = response.json()
    assert answer["request_id"] == "ptr_123"
    assert (answer["status"], answer["error"]["code"]) == ("failed", "not_found")


async def test_bridge_outcomes_are_counted_in_metrics(bridge: BridgeSetup) -> None:
    await post(bridge, request("test.echo"))
    await post(bridge, request("test.secret"))
    text = (await bridge.live.http.get("/metrics")).text
    assert 'gateway_parent_tool_requests_total{code="-",status="succeeded"} 1.0' in text
    assert 'gateway_parent_tool_requests_total{code="forbidden",status="denied"} 1.0' in text


def test_the_public_names_of_the_bridge_resolve() -> None:
    import gateway.bridge as bridge_pkg

    for name in bridge_pkg.__all__:
        assert getattr(bridge_pkg, name) is not None, name
    with pytest.raises(AttributeError):
        _ = bridge_pkg.nothing_here
