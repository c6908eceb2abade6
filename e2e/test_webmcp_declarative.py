"""The declarative variant of WebMCP, as docs/webmcp.md advises it for a product's plain
forms: a `<form toolname tooldescription toolautosubmit>` is a tool the browser derives
from the form (its fields are the input schema) and submits as the person would. It runs
with the page's own session and never reaches the gateway, so it fits forms that do only
what the signed-in person may do anyway (a search, a filter), never the task's tools."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gateway.serving import serving

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

PAGE = """<!doctype html><meta charset="utf-8"><title>Agents</title>
<form toolname="search_agents" tooldescription="Find agents by name" toolautosubmit
      action="/agents">
  <input name="q" type="text" required> <button>Search</button>
</form>"""


async def test_a_plain_form_is_a_tool_the_browser_submits_as_the_person_would(
    dashboard_browser: Any,
) -> None:
    searched: list[str] = []

    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    async def agents(request: Request) -> HTMLResponse:
        searched.append(request.query_params.get("q", ""))
        return HTMLResponse(f"<p id='found'>agents named {searched[-1]!r}</p>")

    site = Starlette(routes=[Route("/", page), Route("/agents", agents)])
    async with serving(site) as origin:
        context = await dashboard_browser.new_context()
        try:
            tab = await context.new_page()
            await tab.goto(origin + "/")
            [tool] = await tab.webmcp.tools()
            assert tool["name"] == "search_agents"
            assert tool["description"] == "Find agents by name"
            assert tool["inputSchema"]["properties"] == {"q": {"type": "string"}}
            assert tool["inputSchema"]["required"] == ["q"]
            try:
                await tab.webmcp.call_tool("search_agents", {"q": "triage"})
            except PlaywrightError as exc:
                # The submit navigates the tab, and the call may end with the page it ran in.
                if "navigation" not in exc.message:
                    raise
            await tab.wait_for_url("**/agents?q=triage")
            assert await tab.text_content("#found") == "agents named 'triage'"
        finally:
            await context.close()
    assert searched == ["triage"]
