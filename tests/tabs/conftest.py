"""Fixtures of the tab channel's tests: gateways with the tab channel installed, a raw
websocket tab client, and (for the browser tests) one Chromium for the session and a
dashboard test page served on its own loopback origin."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect

from gateway.app import build_app
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from gateway.tabs import ChannelLimits, TabConfig, TabHub, Views, install
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

    async def evidence(self, task_id: str, kind: str, wait_for: int = 0) -> list[dict[str, Any]]:
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
    return Settings(
        data_dir=tmp / "data",
        secret_keys=["k-test-newest-0123456789abcdef"],
        control_key="control-key-for-tests-0123456789",
        dashboard_origins=origins,
        example=False,
    )


TabGatewayFactory = Callable[..., Any]


def _start(
    tmp: Path,
    origins: list[str],
    config: TabConfig | None,
    setup: Callable[[Gateway], None] | None = None,
) -> Any:
    import contextlib

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[TabGateway]:
        gw = Gateway(tab_settings(tmp, origins))
        register_views(gw)
        if setup is not None:
            setup(gw)
        if config is not None:
            gw.services.provide(TabConfig, config)
        app = build_app(gateway=gw, extensions=[health.routes, tasks.routes, install])
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            yield TabGateway(base_url, gw, client)

    return run()


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


# --- real Chromium -------------------------------------------------------------------


@dataclass
class Site:
    origin: str  # the dashboard's own origin (allowed)
    foreign: str  # the same page under another origin (not allowed)


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def dashboard_site() -> AsyncIterator[Site]:
    from tests.tabs.dashboard import dashboard_app

    async with serving(dashboard_app()) as origin:
        yield Site(origin, origin.replace("127.0.0.1", "localhost"))


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    from gateway.chromium import find_chromium, launch_args

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=find_chromium(), args=launch_args(webmcp=True)
        )
        yield browser
        await browser.close()


class EchoInput(BaseModel):
    text: str = ""


def register_demo_tools(gw: Gateway) -> None:
    """Two plain tools next to the ui.* ones: an echo for everyone with scope `demo`, and
    one that only admins may call."""
    from gateway.registry import ToolAnnotations, ToolContext

    @gw.registry.tool(
        "demo.echo",
        title="Echo",
        description="Echo the text back, with who asked.",
        input_model=EchoInput,
        scopes=["demo"],
        annotations=ToolAnnotations(read_only=True),
    )
    async def echo(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
        return {"text": args.text, "actor": ctx.identity.actor.id, "task": ctx.identity.task_id}

    @gw.registry.tool(
        "demo.admin_only",
        title="Admin only",
        description="Only admins may call this.",
        input_model=EchoInput,
        scopes=["demo"],
        roles=["admin"],
        annotations=ToolAnnotations(consequential=True),
    )
    async def admin_only(_ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
        return {"ok": args.text}


@dataclass
class E2E:
    live: TabGateway
    site: Site
    browser: Any

    async def page(self, *, origin: str | None = None) -> Any:
        context = await self.browser.new_context()
        self._contexts.append(context)
        page = await context.new_page()
        await page.goto((origin or self.site.origin) + "/")
        await page.wait_for_function("typeof window.start === 'function'")
        return page

    async def start(self, page: Any, token: str, **options: Any) -> dict[str, Any]:
        body: dict[str, Any] = await page.evaluate(
            "(o) => window.start(o)", {"gateway": self.live.base_url, "token": token, **options}
        )
        return body

    async def events(self, page: Any, kind: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await page.evaluate(
            "(k) => window.events.filter((e) => e.type === k)", kind
        )
        return found

    async def wait_event(self, page: Any, kind: str, count: int = 1) -> list[dict[str, Any]]:
        await page.wait_for_function(
            "([k, n]) => window.events.filter((e) => e.type === k).length >= n",
            arg=[kind, count],
            timeout=10_000,
        )
        return await self.events(page, kind)

    _contexts: list[Any]


@pytest_asyncio.fixture(loop_scope="package")
async def e2e(tmp_path: Path, dashboard_site: Site, chromium: Any) -> AsyncIterator[E2E]:
    async with _start(tmp_path, [dashboard_site.origin], None, setup=register_demo_tools) as live:
        harness = E2E(live, dashboard_site, chromium, [])
        try:
            yield harness
        finally:
            for context in harness._contexts:
                await context.close()
