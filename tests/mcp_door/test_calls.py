"""tools/list and tools/call through the MCP door, with the official SDK client over HTTP."""

from __future__ import annotations

from typing import Any, cast

import pytest
from mcp_types import RequestParamsMeta

from gateway.core.results import ErrorCode, ToolStatus
from tests.mcp_door.conftest import ALL_FAILURES, MODES, DoorLive, Empty


@MODES
async def test_initialize_list_and_call(door: DoorLive, mode: str) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"], mode=mode) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        noop = tools["test_noop"]
        assert noop.title == "No-op"
        assert noop.description == "Returns at once."
        assert noop.input_schema["type"] == "object"
        assert noop.annotations is not None
        assert noop.annotations.read_only_hint is True
        assert noop.annotations.idempotent_hint is True
        write = tools["test_write"]
        assert write.annotations is not None
        assert write.annotations.destructive_hint is True
        assert write.annotations.idempotent_hint is False

        result = await client.call_tool("test.noop", {})
    assert result.is_error is False
    structured: dict[str, Any] = result.structured_content
    assert structured["status"] == "succeeded"
    assert structured["output"] == {"ok": True}
    assert structured["tool"] == "test.noop"
    # The text block is the same result written for a model: a status line, then fields.
    assert result.content[0].text == "test.noop succeeded\nok: true"  # type: ignore[union-attr]
    # The handler ran under the token's task, and the call is recorded as an MCP call.
    assert door.probe.identities == [task["task_id"]]
    records = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
    assert [(r["tool"], r["door"], r["status"]) for r in records] == [
        ("test.noop", "mcp", "succeeded")
    ]
    assert records[0]["call_id"] == structured["call_id"]


@MODES
@pytest.mark.parametrize(("status", "code"), ALL_FAILURES)
async def test_every_non_success_is_an_error_result(
    door: DoorLive, mode: str, status: ToolStatus, code: str
) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"], mode=mode) as client:
        result = await client.call_tool("test.fail", {"status": status.value, "code": code})
    assert result.is_error is True
    assert result.structured_content["status"] == status.value
    assert result.structured_content["error"]["code"] == code
    assert "output" not in result.structured_content


@pytest.mark.parametrize(
    ("tool", "arguments", "status", "code"),
    [
        ("test.crash", {}, "failed", ErrorCode.HANDLER_ERROR),
        ("test.slow", {}, "timeout", ErrorCode.TIMEOUT),
        ("test.nothing", {}, "denied", ErrorCode.UNKNOWN_TOOL),
        ("test.fail", {"status": "sideways", "code": "x"}, "failed", ErrorCode.INVALID_INPUT),
    ],
)
async def test_pipeline_outcomes_reach_the_agent(
    door: DoorLive, tool: str, arguments: dict[str, Any], status: str, code: str
) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"]) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error is True
    assert result.structured_content["status"] == status
    assert result.structured_content["error"]["code"] == code
    records = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "call"]
    assert [(r["door"], r["status"]) for r in records] == [("mcp", status)]


@MODES
async def test_progress_notifications_arrive_for_a_long_call(door: DoorLive, mode: str) -> None:
    task = await door.live.create_task()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with door.client(task["tokens"]["agent"], mode=mode) as client:
        result = await client.call_tool(
            "test.progress", {"steps": 3}, progress_callback=on_progress
        )
        assert result.structured_content["output"] == {"steps": 3}
        # Without a progress token nothing is sent, and the call still succeeds.
        quiet = await client.call_tool("test.progress", {"steps": 2})
        assert quiet.structured_content["status"] == "succeeded"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def idem(key: str) -> RequestParamsMeta:
    return cast(RequestParamsMeta, {"idempotency_key": key})


async def test_idempotency_key_from_meta_replays_the_recorded_result(door: DoorLive) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"]) as client:
        first = await client.call_tool("test.write", {"note": "a"}, meta=idem("save-1"))
        again = await client.call_tool("test.write", {"note": "a"}, meta=idem("save-1"))
        other = await client.call_tool("test.write", {"note": "b"}, meta=idem("save-2"))
    assert door.probe.writes == ["a", "b"]
    assert first.structured_content["output"] == {"written": 1}
    assert again.structured_content["output"] == {"written": 1}
    assert again.structured_content["replayed"] is True
    assert other.structured_content["output"] == {"written": 2}


async def test_catalog_is_read_fresh_as_tools_register(door: DoorLive) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"]) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert "test_late" not in before

        @door.live.gateway.registry.tool(
            "test.late", title="Late", description="Registered later.", input_model=Empty
        )
        async def late(_ctx: object, _args: Empty) -> dict[str, Any]:
            return {"late": True}

        after = {t.name for t in (await client.list_tools()).tools}
        assert after == before | {"test_late"}
        result = await client.call_tool("test.late", {})
    assert result.structured_content["output"] == {"late": True}
