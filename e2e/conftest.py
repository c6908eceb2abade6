"""Fixtures of the end-to-end suites: real Chromium, real servers, real gateways.

- `dashboard_browser`: one Chromium for the session's dashboard pages (with WebMCP on).
- `dashboard_site` and `e2e`: the tab-channel test dashboard on its own origin, a gateway
  that accepts it, and a page helper.
- `sites`, `task_chromium` and `browsers`: the two-origin app the task browser's guard is
  tried on, the pool's Chromium for the session, and a gateway per test that shares it.
- `gateway_setup`: what the session gateway of the pytest plugin's fixtures holds, for the
  tests written on those fixtures (`dashboard_page`, `mcp_agent`, `evidence`...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel

from gateway.browser.chromium import find_chromium, launch_args
from gateway.core.registry import ToolAnnotations, ToolContext
from gateway.runtime import Gateway
from gateway.serving import serving
from tests.browser.conftest import browsers, sites, task_chromium
from tests.start_costs import once_per_run
from tests.tabs.conftest import TabGateway, _start, register_views
from tests.tabs.dashboard import dashboard_app


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def dashboard_browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=find_chromium(), args=launch_args(webmcp=True)
        )
        yield browser
        await browser.close()


# --- the tab channel's dashboard -------------------------------------------------------


@dataclass
class Site:
    origin: str  # the dashboard's own origin (allowed)
    foreign: str  # the same page under another origin (not allowed)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def dashboard_site() -> AsyncIterator[Site]:
    async with serving(dashboard_app()) as origin:
        yield Site(origin, origin.replace("127.0.0.1", "localhost"))


class EchoInput(BaseModel):
    text: str = ""


def register_demo_tools(gw: Gateway) -> None:
    """Two plain tools next to the ui.* ones: an echo for everyone with scope `demo`, and
    one that only admins may call."""

    @gw.registry.tool(
        "demo.echo",
        title="Echo",
        description="Echo the text back, with who asked.",
        input_model=EchoInput,
        scopes=["demo"],
        annotations=ToolAnnotations(read_only_hint=True),
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
        annotations=ToolAnnotations(consequential_hint=True),
    )
    async def admin_only(_ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
        return {"ok": args.text}


@dataclass
class E2E:
    live: TabGateway
    site: Site
    browser: Any
    _contexts: list[Any]

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


@pytest_asyncio.fixture(loop_scope="session")
async def e2e(tmp_path: Path, dashboard_site: Site, dashboard_browser: Any) -> AsyncIterator[E2E]:
    async with _start(tmp_path, [dashboard_site.origin], None, setup=register_demo_tools) as live:
        harness = E2E(live, dashboard_site, dashboard_browser, [])
        try:
            yield harness
        finally:
            for context in harness._contexts:
                await context.close()


# --- the gateway of the plugin's fixtures (`gateway`, `dashboard_page`, `mcp_agent`...) ---


@pytest.fixture(scope="session")
def gateway_setup() -> Callable[[Gateway], None]:
    """The session gateway of the suites written on the pytest plugin: the test views and
    the two demo tools."""

    def setup(gw: Gateway) -> None:
        register_views(gw)
        register_demo_tools(gw)

    return setup


# --- the task browser's guard: the same fixtures as tests/browser's ------------------

__all__ = ["browsers", "once_per_run", "sites", "task_chromium"]
