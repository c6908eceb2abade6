"""The teardown check of the shared gateway fixtures, shown failing on planted faults: a
part that does not release what it holds when its task ends is named, with the task."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import BaseRoute

from gateway import mcp_door
from gateway.http import health, tasks
from gateway.mcp_door import McpDoor
from gateway.runtime import Gateway
from gateway.tabs import TabHub
from gateway.tabs import install as install_tabs
from gateway.testing import live_gateway, test_settings
from tests.tabs.conftest import DASHBOARD, RawTab, open_tab

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "leak-check", "version": "1"},
    },
}


def _deaf_to_task_ends(pick: Callable[[Gateway], Any]) -> Callable[[Gateway], list[BaseRoute]]:
    """The planted fault: an extension whose part no longer hears that a task ended."""

    def install(gw: Gateway) -> list[BaseRoute]:
        gw.tasks._end_listeners.remove(pick(gw))
        return []

    return install


async def _a_task_with_an_mcp_session(tmp_path: Path) -> None:
    deaf = _deaf_to_task_ends(lambda gw: gw.services.get(McpDoor).task_ended)
    async with live_gateway(
        test_settings(tmp_path / "data"),
        extensions=[health.routes, tasks.routes, mcp_door.install, deaf],
    ) as live:
        task = await live.create_task()
        opened = await live.http.post(
            "/v1/mcp",
            json=INITIALIZE,
            headers={
                "authorization": f"Bearer {task['tokens']['agent']}",
                "accept": "application/json, text/event-stream",
            },
        )
        assert opened.status_code == 200


async def test_an_mcp_session_kept_after_its_task_ended_is_named(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"held after their tasks ended: MCP session of task_"):
        await _a_task_with_an_mcp_session(tmp_path)


async def _a_task_with_a_tab(tmp_path: Path, tabs: contextlib.AsyncExitStack) -> None:
    deaf = _deaf_to_task_ends(lambda gw: gw.services.get(TabHub).task_ended)
    async with live_gateway(
        test_settings(tmp_path / "data", dashboard_origins=[DASHBOARD]),
        extensions=[health.routes, tasks.routes, install_tabs, deaf],
    ) as live:
        task = await live.create_task()
        ws = await tabs.enter_async_context(open_tab(live.ws_url))
        await RawTab(ws).hello(task["tokens"]["tab"])


async def test_a_tab_left_connected_after_its_task_ended_is_named(tmp_path: Path) -> None:
    async with contextlib.AsyncExitStack() as tabs:  # the tab outlives the gateway's check
        with pytest.raises(AssertionError, match=r"ended: tab channel of task_"):
            await _a_task_with_a_tab(tmp_path, tabs)


async def test_a_clean_gateway_passes(tmp_path: Path) -> None:
    async with live_gateway(test_settings(tmp_path / "data")) as live:
        await live.create_task()
