"""Fixtures of the tab channel's tests: gateways with the tab channel installed, and a raw
websocket tab client. The real-Chromium suites are in e2e/."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect

from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.tabs import ChannelLimits, TabConfig, TabHub, Views, install
from gateway.testing import live_gateway, test_settings
from tests.conftest import Live

DASHBOARD = "http://127.0.0.1:8765"


class BuilderParams(BaseModel):
    agent_id: str


class RunParams(BaseModel):
    run_id: str


def register_views(gw: Gateway) -> None:
    views = Views()
    views.register("agent_builder", BuilderParams, "Agent builder")
    views.register("run_report", RunParams, "Run report")
    gw.services.provide(Views, views)


@dataclass
class TabGateway(Live):
    """A gateway with the tab channel, plus the tab-side views of it the tests need."""

    @property
    def gw(self) -> Gateway:
        return self.gateway

    @property
    def hub(self) -> TabHub:
        return self.gateway.services.get(TabHub)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/v1/tabs"

    async def evidence(  # type: ignore[override]
        self, task_id: str, kind: str, wait_for: int = 0
    ) -> list[dict[str, Any]]:
        """The task's evidence records of one kind; `wait_for` polls (briefly) until at least
        that many are there, since rejected frames are recorded in the background."""
        for _ in range(100):
            response = await self.http.get(f"/v1/tasks/{task_id}/evidence", headers=self.control)
            records: list[dict[str, Any]] = response.json()["records"]
            found = [r for r in records if r.get("kind") == kind]
            if len(found) >= wait_for:
                return found
            await asyncio.sleep(0.05)
        return found

    async def metric(self, name: str, **labels: str) -> float:
        text = (await self.http.get("/metrics")).text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (not want or f"{{{want}}}" in line or want in line):
                total += float(line.rsplit(" ", 1)[1])
        return total


def tab_settings(tmp: Path, origins: list[str]) -> Settings:
    return test_settings(tmp / "data", dashboard_origins=origins)


TabGatewayFactory = Callable[..., Any]


@contextlib.asynccontextmanager
async def _start(
    tmp: Path,
    origins: list[str],
    config: TabConfig | None,
    setup: Callable[[Gateway], None] | None = None,
) -> AsyncIterator[TabGateway]:
    def prepare(gw: Gateway) -> None:
        register_views(gw)
        if setup is not None:
            setup(gw)
        if config is not None:
            gw.services.provide(TabConfig, config)

    async with live_gateway(
        tab_settings(tmp, origins), setup=prepare, extensions=[health.routes, tasks.routes, install]
    ) as live:
        yield TabGateway(live.base_url, live.gateway, live.http, live.created)


@pytest.fixture
async def tab_gateway(tmp_path: Path) -> AsyncIterator[TabGateway]:
    config = TabConfig(hello_timeout_s=1.0, limits=ChannelLimits(max_strikes=4))
    async with _start(tmp_path, [DASHBOARD], config) as running:
        yield running


class RawTab:
    """A tab speaking the wire protocol by hand over a real websocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, frame: dict[str, Any] | str) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, within: float = 5.0) -> dict[str, Any]:
        while True:
            frame: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), within))
            if frame["type"] == "ping":
                await self.send({"type": "pong"})
                continue
            return frame

    async def hello(
        self, token: str, tab_id: str = "tab_1", revision: int = 1, view: Any = None
    ) -> dict[str, Any]:
        await self.send(
            {
                "type": "hello",
                "token": token,
                "tab_id": tab_id,
                "revision": revision,
                "view": view or {"view": "agent_builder", "params": {"agent_id": "ag_1"}},
            }
        )
        return await self.recv()

    async def closed_with(self, within: float = 5.0) -> int | None:
        try:
            while True:
                await asyncio.wait_for(self.ws.recv(), within)
        except Exception:  # noqa: S110 - the close is what we wait for
            pass
        return self.ws.close_code


def open_tab(url: str, origin: str | None = DASHBOARD) -> Any:
    return connect(url, origin=origin, open_timeout=5)  # type: ignore[arg-type]


@pytest_asyncio.fixture
async def raw_tab_factory() -> AsyncIterator[Callable[..., Any]]:
    import contextlib

    @contextlib.asynccontextmanager
    async def make(url: str, origin: str | None = DASHBOARD) -> AsyncIterator[RawTab]:
        async with open_tab(url, origin) as ws:
            yield RawTab(ws)

    yield make
