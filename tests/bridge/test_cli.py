"""`gateway bridge call` and `gateway bridge relay` as real processes."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from gateway.bridge import BridgeClient, as_host_command
from tests.bridge.conftest import BridgeSetup

GATEWAY = [sys.executable, "-m", "gateway.cli"]


async def run(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[int, Any]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    try:
        return proc.returncode, json.loads(out)
    except ValueError:
        raise AssertionError(f"not JSON: {out!r} {err!r}") from None


async def test_bridge_call_prints_the_result_and_exits_zero_on_success(
    bridge: BridgeSetup,
) -> None:
    envelope = json.dumps(bridge.task["parent_tool_bridge"])
    code, result = await run(
        [
            *GATEWAY,
            "bridge",
            "call",
            "--parent-tool-bridge",
            envelope,
            "test.echo",
            "--input",
            '{"text": "from the sandbox"}',
        ],
        bridge.env,
    )
    assert code == 0
    assert result["schema"] == "wp-codebox/parent-tool-result/v1"
    assert result["status"] == "succeeded"
    assert result["output"] == {"echo": {"text": "from the sandbox"}}


async def test_bridge_call_exits_non_zero_for_every_other_status(bridge: BridgeSetup) -> None:
    envelope = json.dumps(bridge.task["parent_tool_bridge"])
    code, denied = await run(
        [*GATEWAY, "bridge", "call", "--parent-tool-bridge", envelope, "test.secret"], bridge.env
    )
    assert (code, denied["status"]) == (1, "denied")
    code, broken = await run(
        [*GATEWAY, "bridge", "call", "--parent-tool-bridge", '{"schema": "x"}', "test.echo"],
        bridge.env,
    )
    assert (code, broken["status"]) == (1, "unavailable")
    code, bad_input = await run(
        [
            *GATEWAY,
            "bridge",
            "call",
            "--parent-tool-bridge",
            envelope,
            "test.echo",
            "--input",
            "{nope",
        ],
        bridge.env,
    )
    assert (code, bad_input["status"], bad_input["error"]["code"]) == (1, "failed", "invalid_input")
    assert bridge.probe.runs["test.secret"] == bridge.probe.runs["test.echo"] == 0


async def test_the_relay_through_the_gateway_command_works_as_a_host_command(
    bridge: BridgeSetup,
) -> None:
    envelope = as_host_command(bridge.envelope, [*GATEWAY, "bridge", "relay"])
    client = BridgeClient.from_envelope(envelope, bridge.env)
    result = await client.call("workspace.write", {"path": "notes/a.md", "contents": "# A\n"})
    assert result.status == "succeeded", result.wire()
    read = await client.call("workspace.read", {"path": "notes/a.md"})
    assert read.output["contents"] == "# A\n"


async def test_the_relay_answers_a_broken_request_with_an_envelope(bridge: BridgeSetup) -> None:
    code, result = await run([sys.executable, "-m", "gateway.bridge.relay"], bridge.env, b"[]")
    assert code == 1
    assert (result["status"], result["error"]["code"]) == ("failed", "invalid_input")
