"""WebMCP consumers nobody here wrote, on the example dashboard as a new user meets it.

Playwright MCP (`@playwright/mcp`, pinned in `tests/clients/package.json`) is launched as a
coding agent launches it, over stdio, with the system's Chromium and its WebMCP feature on
(a `--config` file's `launchOptions.args`). It signs in, presses "Open assistant", and then
lists the tools the dashboard's tab registered through WebMCP (as `webmcp_*` tools of its
own) and calls them; the calls reach the gateway by its WebMCP door and are recorded so.
chrome-devtools-mcp (pinned the same way) does the same with `list_webmcp_tools` and
`execute_webmcp_tool`, behind its `--categoryExperimentalWebmcp` flag.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp.client.stdio import StdioServerParameters, stdio_client

from examples.synthetic_app.serve import ExampleStack, running_stack
from gateway.browser.chromium import find_chromium
from gateway.core.tokens import Purpose
from gateway.testing import test_settings
from gateway.testing.waiting import until
from mcp import Client
from tests.clients.npm import NODE_22, NODE_MODULES, ensure_installed

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

PLAYWRIGHT_MCP = NODE_MODULES / "@playwright" / "mcp" / "cli.js"
CHROME_DEVTOOLS_MCP = NODE_MODULES / "chrome-devtools-mcp" / "build" / "src" / "bin"


async def dashboard_tools(example: ExampleStack) -> int:
    """How many tools the signed-in admin's assistant task registers in the page: its
    catalog, as the gateway lists it for the task (the dashboard's own, the task
    browser's and the UI actions)."""
    await until(lambda: bool(example.gateway.tasks.live_ids()), "the assistant's task")
    [task_id] = example.gateway.tasks.live_ids()
    record = await example.gateway.tasks.get(task_id)
    return len(example.gateway.registry.catalog(record.identity))


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    async with running_stack(test_settings(tmp_path / "data", example=True), step_s=0.05) as s:
        yield s


def playwright_config(tmp_path: Path) -> Path:
    chromium = find_chromium()
    config = {
        "browser": {
            "browserName": "chromium",
            "isolated": True,
            "launchOptions": {
                "executablePath": str(chromium),
                "headless": True,
                "args": ["--no-sandbox", "--enable-features=WebMCP"],
            },
        },
        "outputDir": str(tmp_path / "playwright-mcp"),
    }
    path = tmp_path / "playwright-mcp.json"
    path.write_text(json.dumps(config))
    return path


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def ref_of(snapshot: str, label: str) -> str:
    found = re.search(rf'"{re.escape(label)}"[^\n]*\[ref=([a-z0-9]+)\]', snapshot)
    assert found is not None, f"no {label!r} in the page:\n{snapshot[-2000:]}"
    return found.group(1)


async def click(client: Client, label: str) -> None:
    snapshot = text_of(await client.call_tool("browser_snapshot", {}))
    result = await client.call_tool(
        "browser_click", {"target": ref_of(snapshot, label), "element": label}
    )
    assert not result.is_error, text_of(result)


async def webmcp_tools(client: Client, at_least: int) -> dict[str, Any]:
    """The page's tools as Playwright MCP lists them; it collects them with each snapshot."""
    tools: dict[str, Any] = {}
    for _ in range(50):
        await client.call_tool("browser_snapshot", {})
        listed = (await client.list_tools()).tools
        tools = {t.name: t for t in listed if t.name.startswith("webmcp_")}
        if len(tools) >= at_least:
            break
    return tools


async def test_playwright_mcp_lists_and_calls_the_dashboards_tools_through_webmcp(
    example: ExampleStack, tmp_path: Path
) -> None:
    ensure_installed()
    server = StdioServerParameters(
        command=str(NODE_22),
        args=[str(PLAYWRIGHT_MCP), "--config", str(playwright_config(tmp_path))],
        cwd=str(tmp_path),
    )
    async with Client(stdio_client(server)) as client:
        opened = await client.call_tool(
            "browser_navigate", {"url": f"{example.dashboard_url}/signin"}
        )
        assert not opened.is_error, text_of(opened)
        await click(client, "Ada Admin")
        waited = await client.call_tool("browser_wait_for", {"text": "Open assistant"})
        assert not waited.is_error, text_of(waited)
        await click(client, "Open assistant")
        expected = await dashboard_tools(example)
        tools = await webmcp_tools(client, expected)
        assert len(tools) == expected, sorted(tools)
        assert {
            "webmcp_dashboard_read_view",
            "webmcp_evals_start_run",
            "webmcp_agents_save_draft",
            "webmcp_ui_open_view",
            "webmcp_browser_snapshot",
        } <= set(tools)
        # The registry's hints reach the consumer as the page declared them.
        assert tools["webmcp_dashboard_read_view"].annotations.read_only_hint is True
        assert tools["webmcp_evals_start_run"].annotations.read_only_hint is False

        view = await client.call_tool("webmcp_dashboard_read_view", {})
        assert not view.is_error, text_of(view)
        said = text_of(view)
        shown = json.loads(said[said.index("{") :])
        assert shown["view"] == "agents"
        assert shown["context"]["actor"] == {"id": "ada", "role": "admin"}

        moved = await client.call_tool("webmcp_ui_open_view", {"view": "runs"})
        assert not moved.is_error, text_of(moved)
        waited = await client.call_tool("browser_wait_for", {"text": "Runs"})
        assert not waited.is_error

    calls = await recorded_calls(example)
    assert ("dashboard.read_view", "webmcp", "succeeded") in calls
    assert ("ui.open_view", "webmcp", "succeeded") in calls


async def recorded_calls(example: ExampleStack) -> list[tuple[str, str, str]]:
    control = example.dashboard.control
    assert control is not None
    task = control.latest_for_user("ada")
    assert task is not None
    identity = await example.gateway.tasks.authenticate(task.agent_token, Purpose.AGENT)
    records = await example.gateway.store.evidence_for(identity.org_id, identity.task_id)
    return [(r["tool"], r["door"], r["status"]) for r in records if r["kind"] == "call"]


def uid_of(snapshot: str, label: str) -> str:
    found = re.search(rf'uid=(\S+) button "{re.escape(label)}"', snapshot)
    assert found is not None, f"no {label!r} in the page:\n{snapshot[-2000:]}"
    return found.group(1)


async def test_chrome_devtools_mcp_lists_and_calls_the_dashboards_tools_through_webmcp(
    example: ExampleStack, tmp_path: Path
) -> None:
    ensure_installed()
    server = StdioServerParameters(
        command=str(NODE_22),
        args=[
            str(CHROME_DEVTOOLS_MCP / "chrome-devtools-mcp.js"),
            "--headless",
            "--isolated",
            f"--executablePath={find_chromium()}",
            "--chromeArg=--no-sandbox",
            "--chromeArg=--enable-features=WebMCP",
            "--categoryExperimentalWebmcp",
            "--usageStatistics=false",
        ],
        cwd=str(tmp_path),
        env={**os.environ, "CHROME_DEVTOOLS_MCP_NO_USAGE_STATISTICS": "1"},
    )
    async with Client(stdio_client(server)) as client:
        pages = text_of(await client.call_tool("list_pages", {}))
        found = re.search(r"(\d+):", pages)
        assert found is not None, pages
        page = {"pageId": int(found.group(1))}
        url = f"{example.dashboard_url}/signin"
        opened = await client.call_tool("navigate_page", {**page, "type": "url", "url": url})
        assert not opened.is_error, text_of(opened)
        for label in ("Ada Admin", "Open assistant"):
            snapshot = text_of(await client.call_tool("take_snapshot", page))
            if label not in snapshot:
                await client.call_tool("wait_for", {**page, "text": [label]})
                snapshot = text_of(await client.call_tool("take_snapshot", page))
            clicked = await client.call_tool("click", {**page, "uid": uid_of(snapshot, label)})
            assert not clicked.is_error, text_of(clicked)
        listed: list[str] = []
        expected = await dashboard_tools(example)
        for _ in range(50):
            listing = text_of(await client.call_tool("list_webmcp_tools", page))
            listed = re.findall(r'name="([a-z0-9_]+)"', listing)
            if len(listed) >= expected:
                break
        assert len(listed) == expected, listed
        assert '"consequential":true' in listing  # agents_save_draft, from the registry's hint
        ran = await client.call_tool(
            "execute_webmcp_tool", {**page, "toolName": "dashboard_read_view", "input": "{}"}
        )
        said = text_of(ran)
        answer = json.loads(said[said.index("{") : said.rindex("}") + 1])
    assert answer["status"] == "Completed", answer
    assert answer["output"]["context"]["actor"] == {"id": "ada", "role": "admin"}
    assert ("dashboard.read_view", "webmcp", "succeeded") in await recorded_calls(example)
