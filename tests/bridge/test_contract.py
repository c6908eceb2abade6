"""Contract tests: fixture envelopes for every status, through both dispatch modes.

`host_endpoint` goes over real HTTP to a real gateway on loopback; `host_command` runs the
shipped relay (`python -m gateway.cli bridge relay`) as a real subprocess, which in turn
posts to the same gateway.
"""

from __future__ import annotations

import json
import sys

import pytest

from gateway.bridge import (
    BridgeClient,
    ParentToolRequest,
    ParentToolResult,
    as_host_command,
    load_bridge,
)
from gateway.bridge.schemas import ENDPOINT_ENV, TOKEN_ENV
from gateway.serving import free_port
from tests.bridge.conftest import MODES, BridgeSetup, fixture

STATUSES = ("succeeded", "denied", "unavailable", "timeout", "failed")


def test_the_seed_envelopes_are_valid_contract_envelopes() -> None:
    endpoint = load_bridge(fixture("bridge_host_endpoint.json"))
    command = load_bridge(fixture("bridge_host_command.json"))
    assert endpoint.dispatcher.mode == "host_endpoint"
    assert command.dispatcher.command is not None
    assert command.dispatcher.command.argv == ["gateway", "bridge", "relay"]
    request = ParentToolRequest.model_validate(fixture("request_seed.json"))
    result = ParentToolResult.model_validate(fixture("result_seed.json"))
    # The wire form gives back exactly the seed's fields.
    assert request.wire() == fixture("request_seed.json")
    assert set(result.wire()) == set(fixture("result_seed.json"))
    for status in STATUSES:
        ParentToolRequest.model_validate(fixture(f"request_{status}.json"))
        assert ParentToolResult.model_validate(fixture(f"result_{status}.json")).status == status


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status", STATUSES)
async def test_each_fixture_request_ends_in_its_status(
    bridge: BridgeSetup, mode: str, status: str
) -> None:
    request = ParentToolRequest.model_validate(fixture(f"request_{status}.json"))
    expected = ParentToolResult.model_validate(fixture(f"result_{status}.json"))
    env = bridge.env
    timeout_ms = None
    if status == "unavailable":
        # Nothing listens there: the dispatcher cannot be reached.
        env = {**env, ENDPOINT_ENV: f"http://127.0.0.1:{free_port()}/v1/parent-tools"}
    if status == "timeout":
        timeout_ms = 1000  # the tool sleeps longer than the bridge's declared timeout

    result = await bridge.client(mode, timeout_ms=timeout_ms, env=env).send(request)

    assert result.status == expected.status, result.wire()
    assert (result.request_id, result.tool, result.operation) == (
        expected.request_id,
        expected.tool,
        expected.operation,
    )
    if expected.error is None:
        assert result.error is None
        assert result.output == expected.output
    else:
        assert result.error is not None
        assert (result.error.code, result.error.retryable) == (
            expected.error.code,
            expected.error.retryable,
        )
        assert result.output is None
    if status in ("succeeded", "denied", "failed"):
        # Decided by the host: a redacted transcript was persisted for the call.
        [ref] = result.artifacts.transcripts
        assert ref.kind == "tool-call-transcript"
        assert ref.path == f"files/parent-tools/{request.request_id}.json"
    if status == "denied":
        assert bridge.probe.runs["test.secret"] == 0


@pytest.mark.parametrize("mode", MODES)
async def test_statuses_decided_by_the_tool_reach_the_sandbox_unchanged(
    bridge: BridgeSetup, mode: str
) -> None:
    client = bridge.client(mode)
    down = await client.call("test.down", {})
    assert down.status == "unavailable"
    assert down.error is not None
    assert (down.error.code, down.error.retryable) == ("tab_unavailable", True)
    slow = await client.call("test.slow", {"seconds": 30})
    assert slow.status == "timeout"
    assert slow.error is not None
    assert slow.error.code == "timeout"
    bad = await client.call("test.echo", {"text": 5})
    assert bad.status == "failed"
    assert bad.error is not None
    assert bad.error.code == "invalid_input"


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_off_the_allowlist_is_denied_before_it_leaves_the_sandbox(
    bridge: BridgeSetup, mode: str
) -> None:
    before = await bridge.gw.store.evidence_for("org_a", bridge.task["task_id"])
    result = await bridge.client(mode).call("test.secret", {"text": "x"})
    assert result.status == "denied"
    assert result.error is not None
    assert result.error.code == "forbidden"
    assert bridge.probe.runs["test.secret"] == 0
    # Not even sent: the host has no record of it.
    assert await bridge.gw.store.evidence_for("org_a", bridge.task["task_id"]) == before


async def test_a_missing_command_is_unavailable(bridge: BridgeSetup) -> None:
    envelope = as_host_command(bridge.envelope, ["/nonexistent/dispatcher-program"])
    result = await BridgeClient.from_envelope(envelope, bridge.env).call("test.echo", {})
    assert result.status == "unavailable"
    assert bridge.probe.runs["test.echo"] == 0


async def test_a_command_that_prints_no_envelope_is_failed_not_trusted(
    bridge: BridgeSetup,
) -> None:
    argv = [
        sys.executable,
        "-c",
        'import sys; sys.stdin.read(); print(\'{"status": "succeeded"}\')',
    ]
    envelope = as_host_command(bridge.envelope, argv)
    result = await BridgeClient.from_envelope(envelope, bridge.env).call("test.echo", {})
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "invalid_result"


async def test_an_answer_for_another_request_is_not_accepted(bridge: BridgeSetup) -> None:
    forged = ParentToolResult.model_validate(fixture("result_succeeded.json")).wire()
    forged["request_id"] = "ptr_someone_else"
    script = f"import sys; sys.stdin.read(); sys.stdout.write({json.dumps(json.dumps(forged))})"
    envelope = as_host_command(bridge.envelope, [sys.executable, "-c", script])
    result = await BridgeClient.from_envelope(envelope, bridge.env).call("test.echo", {})
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "invalid_result"


@pytest.mark.parametrize("missing", ["url", "token"])
async def test_an_unconfigured_endpoint_is_unavailable(bridge: BridgeSetup, missing: str) -> None:
    env = dict(bridge.env)
    env.pop(ENDPOINT_ENV if missing == "url" else TOKEN_ENV)
    result = await bridge.client("host_endpoint", env=env).call("test.echo", {})
    assert result.status == "unavailable"
    assert result.error is not None
    assert (ENDPOINT_ENV if missing == "url" else TOKEN_ENV) in result.error.message
    assert bridge.probe.runs["test.echo"] == 0


async def test_an_input_that_is_not_an_object_never_leaves_the_sandbox(
    bridge: BridgeSetup,
) -> None:
    result = await bridge.client().call("test.echo", ["not", "an", "object"])
    assert (result.status, result.error and result.error.code) == ("failed", "invalid_input")
    assert bridge.probe.runs["test.echo"] == 0
