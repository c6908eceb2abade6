"""Faults that land while a call is in flight: the task's Chromium killed during a browser
call, and the tab's connection cut during a UI action. Each call still ends in one
contract result (retryable, so the caller knows to try again), and the next call works."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from websockets.asyncio.client import connect

from gateway.browser import BrowserPool
from gateway.core.results import Door, ToolStatus
from gateway.core.tokens import Purpose
from gateway.serving import serving
from gateway.testing import test_settings
from mcp import Client
from tests.conftest import Live, LiveFactory

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

DASHBOARD = "http://127.0.0.1:8765"


@dataclass
class SlowApp:
    """An app whose `/slow` page never finishes loading, and says when it was asked."""

    origin: str = ""
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@pytest_asyncio.fixture
async def slow_app() -> AsyncIterator[SlowApp]:
    app_state = SlowApp()

    async def home(_r: Request) -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>Home</title><h1>Home</h1><button>Go</button>")

    async def slow(_r: Request) -> HTMLResponse:
        app_state.asked.set()
        # Held until the test is over (a server being stopped waits for its requests).
        await app_state.release.wait()
        return HTMLResponse("<h1>too late</h1>")

    app = Starlette(routes=[Route("/", home), Route("/slow", slow)])
    async with serving(app) as origin:
        app_state.origin = origin
        try:
            yield app_state
        finally:
            app_state.release.set()


@pytest_asyncio.fixture
async def live(tmp_path: Path, live_factory: LiveFactory) -> AsyncIterator[Live]:
    settings = test_settings(
        tmp_path / "data",
        dashboard_origins=[DASHBOARD],
    )
    async with live_factory(settings) as running:
        yield running


async def call_records(live: Live, task_id: str) -> list[dict[str, Any]]:
    response = await live.http.get(f"/v1/tasks/{task_id}/evidence", headers=live.control)
    return [r for r in response.json()["records"] if r["kind"] == "call"]


async def test_chromium_killed_during_a_browser_call(live: Live, slow_app: SlowApp) -> None:
    body = await live.create_task(scopes=["browser"], app_origin=slow_app.origin)
    identity = await live.gateway.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
    pipeline = live.gateway.pipeline
    assert (await pipeline.call(identity, "browser.navigate", {"url": "/"}, door=Door.MCP)).ok
    session = live.gateway.services.get(BrowserPool).session(identity.task_id)
    assert session is not None and session.process.pid is not None

    in_flight = asyncio.create_task(
        pipeline.call(identity, "browser.navigate", {"url": "/slow"}, door=Door.MCP)
    )
    # Chromium has asked for the page: the call is inside the browser now.
    await asyncio.wait_for(slow_app.asked.wait(), 30)
    assert not in_flight.done()
    os.kill(session.process.pid, signal.SIGKILL)

    result = await asyncio.wait_for(in_flight, 60)
    assert result.status is ToolStatus.UNAVAILABLE, result
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("browser_unavailable", True)

    # The retry gets a fresh context on a relaunched Chromium and works.
    again = await asyncio.wait_for(
        pipeline.call(identity, "browser.navigate", {"url": "/"}, door=Door.MCP), 60
    )
    assert again.ok, again
    snap = await pipeline.call(identity, "browser.snapshot", {}, door=Door.MCP)
    assert snap.ok and 'heading "Home"' in snap.output["snapshot"]
    statuses = [r["status"] for r in await call_records(live, identity.task_id)]
    assert statuses == ["succeeded", "unavailable", "succeeded", "succeeded"]
    await live.end_task(identity.task_id)
    assert live.gateway.services.get(BrowserPool).live_count() == 0


async def test_tab_connection_cut_during_a_ui_call(live: Live) -> None:
    body = await live.create_task(scopes=["ui"])
    ws_url = live.base_url.replace("http://", "ws://") + "/v1/tabs"
    headers = {"authorization": f"Bearer {body['tokens']['agent']}"}
    async with (
        connect(ws_url, origin=DASHBOARD, open_timeout=5) as tab,  # type: ignore[arg-type]
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(f"{live.base_url}/v1/mcp", http_client=http)) as agent,
    ):
        hello = {
            "type": "hello",
            "token": body["tokens"]["tab"],
            "tab_id": "tab_1",
            "revision": 1,
            "view": {"view": "home", "params": {}},
        }
        await tab.send(json.dumps(hello))
        assert '"welcome"' in str(await asyncio.wait_for(tab.recv(), 5))

        pending = asyncio.create_task(agent.call_tool("ui.show_run_progress", {"run_id": "r1"}))
        request = str(await asyncio.wait_for(tab.recv(), 10))
        assert '"show_run_progress"' in request
        # The tab's connection drops with no close handshake, the request unanswered.
        assert tab.transport is not None
        tab.transport.abort()

        result = await asyncio.wait_for(pending, 30)
        content = result.structured_content or {}
        assert content["status"] == "unavailable", content
        assert (content["error"]["code"], content["error"]["retryable"]) == (
            "tab_unavailable",
            True,
        )
        # No tab now: the next call says so at once, and says it the same way.
        after = await asyncio.wait_for(agent.call_tool("ui.read_view", {}), 30)
        assert (after.structured_content or {})["error"]["code"] == "tab_unavailable"

    records = await call_records(live, body["task_id"])
    assert [(r["tool"], r["door"], r["status"]) for r in records] == [
        ("ui.show_run_progress", "mcp", "unavailable"),
        ("ui.read_view", "mcp", "unavailable"),
    ]
