"""Host delegation at `POST /v1/delegations`: every validation rule, failing and passing.

Provider payloads come from a scripted adapter (the request's `metadata.reply` is what it
returns), so each rule on the adapter's result can be tried on its own; the shipped local
adapter is tested for real through the registry pipeline.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from gateway.bridge import (
    DelegationContext,
    DelegationHosts,
    HostDelegationRequest,
    HostDelegationResult,
    LocalRegistryAdapter,
)
from gateway.settings import Settings
from tests.bridge.conftest import ALLOWED, EXTENSIONS, SCOPES, HandlerRuns, add_probe_tools
from tests.conftest import Live

DIGEST = hashlib.sha256(b"source at commit abc").hexdigest()
OTHER_DIGEST = hashlib.sha256(b"source at an older commit").hexdigest()


class ScriptedAdapter:
    """Returns `metadata.reply` as its payload; `"raise"` and `"hang"` misbehave."""

    name = "scripted"

    async def delegate(
        self, request: HostDelegationRequest, context: DelegationContext
    ) -> Mapping[str, Any]:
        reply = request.metadata.get("reply")
        if reply == "raise":
            raise RuntimeError("the provider broke")
        if reply == "hang":
            await asyncio.sleep(30)
        await context.emit({"note": "scripted"})
        assert isinstance(reply, Mapping) or reply is None or isinstance(reply, list)
        return reply  # type: ignore[return-value]


@pytest.fixture
async def live_d(settings: Settings, live_factory: Callable[..., Any]) -> AsyncIterator[Any]:
    probe = HandlerRuns()

    def setup(gw: Any) -> None:
        add_probe_tools(gw, probe)
        hosts = DelegationHosts()
        hosts.add(ScriptedAdapter())
        gw.services.provide(DelegationHosts, hosts)

    async with live_factory(settings, setup=setup, extensions=EXTENSIONS) as live:
        task = await live.create_task(scopes=SCOPES, allowed_tools=ALLOWED)
        yield live, task, probe


def base(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema": "wp-codebox/host-delegation-request/v1",
        "version": 1,
        "request_id": "hdr_1",
        "goal": "summarise the failing scenarios",
        "sandbox_session_id": "sandbox_1",
        "source_digest": DIGEST,
        "orchestrator": {"adapter": "scripted"},
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not ...}


def reply(**fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "request_id": "hdr_1",
        "status": "completed",
        "sandbox_session_id": "sandbox_1",
        "source_digest": DIGEST,
        "result": {"summary": "two scenarios failed"},
    }
    payload.update(fields)
    return {k: v for k, v in payload.items() if v is not ...}


async def delegate(live: Live, task: dict[str, Any], body: Any) -> tuple[int, dict[str, Any]]:
    response = await live.http.post(
        "/v1/delegations",
        json=body,
        headers={"authorization": f"Bearer {task['tokens']['agent']}"},
    )
    answer: dict[str, Any] = response.json()
    HostDelegationResult.model_validate(answer)  # every answer is a result envelope
    assert answer["schema"] == "wp-codebox/host-delegation-result/v1"
    return response.status_code, answer


# -- the request --------------------------------------------------------------------------

REQUEST_CASES: list[tuple[str, dict[str, Any], bool]] = [
    # (case, fields, valid)
    ("goal given", {}, True),
    ("task as text instead of goal", {"goal": ..., "task": "collect the report"}, True),
    ("task as an object", {"goal": ..., "task": {"kind": "report"}}, True),
    ("neither goal nor task", {"goal": ...}, False),
    ("blank goal", {"goal": "   "}, False),
    ("empty task text", {"goal": ..., "task": ""}, False),
    ("empty task object", {"goal": ..., "task": {}}, False),
    ("goal mistyped", {"goal": 7}, False),
    *[
        (f"{f} as an object", {f: {"k": "v"}}, True)
        for f in ("target", "context", "execution", "metadata")
    ],
    ("orchestrator as an object", {"orchestrator": {"adapter": "scripted", "x": 1}}, True),
    *[
        (f"{f} as a list", {f: ["x"]}, False)
        for f in ("target", "context", "execution", "orchestrator", "metadata")
    ],
    *[(f"{f} as text", {f: "x"}, False) for f in ("target", "context", "execution")],
    *[(f"{f} as null", {f: None}, False) for f in ("target", "metadata")],
    ("expected_artifacts absent", {}, True),
    ("expected_artifacts empty", {"expected_artifacts": []}, True),
    ("expected_artifacts listed", {"expected_artifacts": ["report.md", {"kind": "trace"}]}, True),
    ("expected_artifacts as text", {"expected_artifacts": "report.md"}, False),
    ("expected_artifacts as an object", {"expected_artifacts": {"a": 1}}, False),
    ("source_digest absent", {"source_digest": ...}, True),
    ("source_digest uppercase hex", {"source_digest": DIGEST.upper()}, True),
    ("source_digest 63 hex", {"source_digest": DIGEST[:63]}, False),
    ("source_digest 65 hex", {"source_digest": DIGEST + "0"}, False),
    ("source_digest not hex", {"source_digest": "g" * 64}, False),
    ("source_digest as a number", {"source_digest": 12345}, False),
    ("unknown schema id", {"schema": "wp-codebox/host-delegation-request/v2"}, False),
    ("wrong version", {"version": 2}, False),
    ("version as text", {"version": "1"}, False),
    ("no request id", {"request_id": ...}, False),
    ("unknown field", {"callback_url": "http://x"}, False),
    ("two different sessions", {"session_id": "sandbox_2"}, False),
]


@pytest.mark.parametrize(
    ("case", "fields", "valid"), REQUEST_CASES, ids=[c[0] for c in REQUEST_CASES]
)
async def test_each_request_rule(
    live_d: Any, case: str, fields: dict[str, Any], valid: bool
) -> None:
    live, task, _probe = live_d
    body = base(**fields)
    body.setdefault("metadata", {})
    if isinstance(body["metadata"], dict):
        body["metadata"] = {**body["metadata"], "reply": reply(source_digest=...)}
    status, answer = await delegate(live, task, body)
    if valid:
        assert status == 200, (case, answer)
        assert answer["status"] == "completed", (case, answer)
    else:
        assert status == 422, (case, answer)
        assert answer["status"] == "failed"
        assert answer["error"]["code"] == "invalid_request"
        assert "result" not in answer


async def test_a_body_that_is_not_an_object_is_refused(live_d: Any) -> None:
    live, task, _ = live_d
    status, answer = await delegate(live, task, ["goal"])
    assert (status, answer["error"]["code"]) == (422, "invalid_request")


@pytest.mark.parametrize("purpose", ["bridge", "tab"])
async def test_only_the_agent_token_may_delegate(live_d: Any, purpose: str) -> None:
    live, task, _ = live_d
    response = await live.http.post(
        "/v1/delegations",
        json=base(metadata={"reply": reply()}),
        headers={"authorization": f"Bearer {task['tokens'][purpose]}"},
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"


# -- the adapter's result -------------------------------------------------------------------

RESULT_CASES: list[tuple[str, Any, str | None]] = [
    # (case, provider payload, expected failure code or None when it passes)
    ("completed", reply(), None),
    ("accepted", reply(status="accepted", result=...), None),
    (
        "failed with an error",
        reply(status="failed", result=..., error={"code": "provider_down", "message": "m"}),
        None,
    ),
    (
        "unavailable with an error",
        reply(
            status="unavailable",
            result=...,
            error={"code": "busy", "message": "m", "retryable": True},
        ),
        None,
    ),
    ("request id omitted", reply(request_id=...), None),
    ("session and digest omitted", reply(sandbox_session_id=..., source_digest=...), None),
    ("session under its other name", reply(sandbox_session_id=..., session_id="sandbox_1"), None),
    ("digest in uppercase", reply(source_digest=DIGEST.upper()), None),
    ("status outside the set", reply(status="succeeded"), "invalid_provider_result"),
    ("status missing", reply(status=...), "invalid_provider_result"),
    ("failed without an error", reply(status="failed"), "invalid_provider_result"),
    ("payload not an object", ["completed"], "invalid_provider_result"),
    ("payload null", None, "invalid_provider_result"),
    ("result not an object", reply(result="done"), "invalid_provider_result"),
    ("unknown field", reply(command="rm -rf /"), "invalid_provider_result"),
    ("another schema", reply(schema="wp-codebox/parent-tool-result/v1"), "invalid_provider_result"),
    ("another version", reply(version=2), "invalid_provider_result"),
    ("another request id", reply(request_id="hdr_other"), "request_mismatch"),
    ("another sandbox session", reply(sandbox_session_id="sandbox_2"), "session_mismatch"),
    ("another session_id", reply(session_id="sandbox_2"), "session_mismatch"),
    ("stale source digest", reply(source_digest=OTHER_DIGEST), "stale_source_digest"),
    ("digest not hex", reply(source_digest="z" * 64), "invalid_provider_result"),
]


@pytest.mark.parametrize(
    ("case", "payload", "code"), RESULT_CASES, ids=[c[0] for c in RESULT_CASES]
)
async def test_each_result_rule(live_d: Any, case: str, payload: Any, code: str | None) -> None:
    live, task, _ = live_d
    status, answer = await delegate(live, task, base(metadata={"reply": payload}))
    assert status == 200
    if code is None:
        assert answer["status"] == payload["status"], (case, answer)
        assert answer.get("result") == payload.get("result")
    else:
        assert answer["status"] == "failed", (case, answer)
        assert answer["error"]["code"] == code
        # A rejected provider payload leaves nothing of itself in the answer.
        assert "result" not in answer
        assert answer["artifacts"] == []
        assert answer["request_id"] == "hdr_1"


async def test_a_session_stated_by_the_provider_must_exist_in_the_request(live_d: Any) -> None:
    live, task, _ = live_d
    body = base(sandbox_session_id=..., metadata={"reply": reply()})
    _, answer = await delegate(live, task, body)
    assert answer["error"]["code"] == "session_mismatch"


async def test_a_provider_that_raises_or_hangs_is_a_structured_failure(live_d: Any) -> None:
    live, task, _ = live_d
    _, raised = await delegate(live, task, base(metadata={"reply": "raise"}))
    assert (raised["status"], raised["error"]["code"]) == ("failed", "adapter_error")
    assert "the provider broke" not in raised["error"]["message"]
    hang = base(metadata={"reply": "hang"}, execution={"timeout_ms": 200})
    _, timed = await delegate(live, task, hang)
    assert (timed["status"], timed["error"]["code"], timed["error"]["retryable"]) == (
        "failed",
        "timeout",
        True,
    )


async def test_an_unknown_adapter_is_unavailable(live_d: Any) -> None:
    live, task, _ = live_d
    _, answer = await delegate(live, task, base(orchestrator={"adapter": "nowhere"}))
    assert (answer["status"], answer["error"]["code"]) == ("unavailable", "unavailable")


async def test_events_are_recorded_as_host_delegation_event_evidence(live_d: Any) -> None:
    live, task, _ = live_d
    await delegate(live, task, base(metadata={"reply": reply()}))
    await delegate(live, task, base(request_id="hdr_2", metadata={"reply": reply()}))
    records = await live.gateway.store.evidence_for("org_a", task["task_id"])
    events = [r["data"] for r in records if r["kind"] == "host-delegation-event"]
    assert all(e["schema"] == "wp-codebox/host-delegation-event/v1" for e in events)
    first = [e["event"] for e in events if e["request_id"] == "hdr_1"]
    assert first == ["received", "dispatched", "adapter_event", "result"]
    rejected = [e for e in events if e["request_id"] == "hdr_2"]
    assert rejected[-1]["event"] == "result_rejected"
    assert rejected[-1]["data"]["code"] == "request_mismatch"


# -- the local adapter ------------------------------------------------------------------------


async def test_the_local_adapter_runs_steps_through_the_registry(live_d: Any) -> None:
    live, task, probe = live_d
    body = base(
        orchestrator={"adapter": LocalRegistryAdapter.name},
        execution={
            "steps": [
                {"tool": "workspace.write", "input": {"path": "r.md", "contents": "ok"}},
                {"tool": "workspace.read", "input": {"path": "r.md"}},
                {"tool": "test.echo", "input": {"text": "done"}},
            ]
        },
    )
    _, answer = await delegate(live, task, body)
    assert answer["status"] == "completed", answer
    steps = answer["result"]["steps"]
    assert [s["status"] for s in steps] == ["succeeded"] * 3
    assert steps[1]["output"]["contents"] == "ok"
    assert answer["source_digest"] == DIGEST
    records = await live.gateway.store.evidence_for("org_a", task["task_id"])
    doors = {r["tool"]: r["door"] for r in records if r["kind"] == "call"}
    assert doors == {
        "workspace.write": "delegation",
        "workspace.read": "delegation",
        "test.echo": "delegation",
    }
    # Replaying the same delegation does not write twice (idempotent by request id).
    await delegate(live, task, body)
    assert probe.runs["test.echo"] == 2


async def test_the_local_adapter_stops_at_a_denied_step(live_d: Any) -> None:
    live, task, probe = live_d
    body = base(
        orchestrator={"adapter": "local"},
        execution={"steps": [{"tool": "test.secret", "input": {}}, {"tool": "test.echo"}]},
    )
    _, answer = await delegate(live, task, body)
    assert answer["status"] == "failed"
    assert answer["error"]["code"] == "forbidden"
    assert probe.runs["test.secret"] == probe.runs["test.echo"] == 0


async def test_the_local_adapter_needs_steps(live_d: Any) -> None:
    live, task, _ = live_d
    _, answer = await delegate(live, task, base(orchestrator={"adapter": "local"}))
    assert (answer["status"], answer["error"]["code"]) == ("failed", "invalid_input")
