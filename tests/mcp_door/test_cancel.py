"""A client that cancels a call reaches the handler, and the call is recorded as cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio

from tests.mcp_door.conftest import MODES, DoorLive


async def wait_for_record(door: DoorLive, task_id: str, tool: str) -> dict[str, Any]:
    for _ in range(200):
        records = [
            r for r in await door.evidence(task_id) if r["kind"] == "call" and r["tool"] == tool
        ]
        if records:
            return records[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no evidence record for {tool}")


@MODES
async def test_cancelling_a_call_reaches_the_handler_waiting_on_the_ui(
    door: DoorLive, mode: str
) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"], mode=mode) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "test.wait_ui", {})
            with anyio.fail_after(10):
                await door.probe.started.wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(10):
            await door.probe.cancelled.wait()
        # The session (or connection) is still good for the next call.
        after = await client.call_tool("test.noop", {})
        assert after.structured_content["status"] == "succeeded"
    record = await wait_for_record(door, task["task_id"], "test.wait_ui")
    assert record["door"] == "mcp"
    assert record["status"] == "failed"
    assert record["error"]["code"] == "cancelled"
    # The UI reply never came, so nothing else could have ended the call.
    assert not door.probe.ui_reply.is_set()


async def test_a_call_that_is_not_cancelled_gets_its_ui_reply(door: DoorLive) -> None:
    task = await door.live.create_task()
    async with door.client(task["tokens"]["agent"]) as client:

        async def reply_when_started() -> None:
            await door.probe.started.wait()
            door.probe.ui_reply.set()

        async with anyio.create_task_group() as group:
            group.start_soon(reply_when_started)
            result = await client.call_tool("test.wait_ui", {})
    assert result.structured_content["output"] == {"replied": True}
    assert not door.probe.cancelled.is_set()
