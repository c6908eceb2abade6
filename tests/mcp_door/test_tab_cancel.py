"""An MCP client cancels a `ui.*` call: the tab that holds the UI action sees the `cancel`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from gateway import mcp_door, tabs
from gateway.http import health
from gateway.http import tasks as task_routes
from gateway.settings import Settings
from tests.mcp_door.conftest import MODES, DoorLive, ToolsSeen

DASHBOARD = "http://127.0.0.1:8765"  # the `settings` fixture's dashboard origin


@pytest.fixture
async def tab_door(settings: Settings, live_factory: Callable[..., Any]) -> AsyncIterator[DoorLive]:
    async with live_factory(
        settings, extensions=[health.routes, task_routes.routes, tabs.install, mcp_door.install]
    ) as live:
        yield DoorLive(live, ToolsSeen())


async def frame(ws: ClientConnection, kind: str) -> dict[str, Any]:
    """The next frame of `kind`, answering pings on the way."""
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if message["type"] == kind:
            return message  # type: ignore[no-any-return]
        if message["type"] == "ping":
            await ws.send(json.dumps({"type": "pong"}))


@MODES
async def test_cancel_reaches_the_tab_holding_the_ui_action(tab_door: DoorLive, mode: str) -> None:
    task = await tab_door.live.create_task(scopes=["ui"])
    ws_url = tab_door.live.base_url.replace("http://", "ws://") + "/v1/tabs"
    async with connect(ws_url, origin=DASHBOARD) as ws:  # type: ignore[arg-type]
        hello = {
            "type": "hello",
            "token": task["tokens"]["tab"],
            "tab_id": "tab-1",
            "revision": 1,
            "view": {"view": "home", "params": {}},
        }
        await ws.send(json.dumps(hello))
        welcome = await frame(ws, "welcome")
        assert "ui_read_view" in {tool["name"] for tool in welcome["tools"]}

        async with tab_door.client(task["tokens"]["agent"], mode=mode) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "ui.read_view", {})
                # The UI action reached the tab; the tab does not answer it.
                request = await frame(ws, "request")
                assert request["action"]["type"] == "read_view"
                group.cancel_scope.cancel()
            cancel = await frame(ws, "cancel")
            assert cancel["id"] == request["id"]

    for _ in range(200):
        records = [
            r
            for r in await tab_door.evidence(task["task_id"])
            if r["kind"] == "call" and r["tool"] == "ui.read_view"
        ]
        if records:
            break
        await asyncio.sleep(0.02)
    assert [(r["door"], r["status"], r["error"]["code"]) for r in records] == [
        ("mcp", "failed", "cancelled")
    ]
