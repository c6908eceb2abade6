"""The first workflow end to end in real Chromium: a signed-in user, the assistant panel on
the gateway's tab channel, and the six operations called through the MCP door and through
WebMCP, with their results checked in the DOM, the app's store and the evidence."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from mcp.client.streamable_http import streamable_http_client

from examples.synthetic_app.directory import USERS
from examples.synthetic_app.models import RunRequest
from examples.synthetic_app.serve import ExampleStack, running_stack
from examples.synthetic_app.store import who
from examples.synthetic_app.workflow import (
    Door,
    mcp_door,
    open_assistant,
    run_workflow,
    sign_in,
    webmcp_door,
)
from gateway.core.results import Door as GatewayDoor
from gateway.core.tokens import Purpose
from gateway.testing import test_settings
from mcp import Client
from tests.clients.npm import ensure_installed, ts_agent

# The pattern Claude Desktop enforces on a whole tool list (Codex and Copilot alike).
CLIENT_SAFE = re.compile(r"[a-zA-Z0-9_-]{1,64}")

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ADA = who("org_acme", "ada")


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    settings = test_settings(
        tmp_path / "data",
        example=True,
    )
    async with running_stack(settings, step_s=0.05) as stack:
        yield stack


async def new_page(browser: Any) -> tuple[Any, Any]:
    context = await browser.new_context(viewport={"width": 1360, "height": 860})
    return context, await context.new_page()


@contextlib.asynccontextmanager
async def door_for(name: str, stack: ExampleStack, page: Any, token: str) -> AsyncIterator[Door]:
    if name == "webmcp":
        yield webmcp_door(page)
    else:
        async with mcp_door(stack.gateway_url, token) as door:
            yield door


@pytest.mark.parametrize("door_name", ["mcp", "webmcp"])
async def test_the_first_workflow_through_each_door(
    dashboard_browser: Any, example: ExampleStack, door_name: str
) -> None:
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        token = await open_assistant(page, example, "ada")
        # The tab token came through the session, never a URL.
        assert "token" not in page.url
        # A marker a full page load would wipe: the panel must survive every view change.
        await page.evaluate("window.__sameDocument = true")
        async with door_for(door_name, example, page, token) as door:
            steps = await run_workflow(example, page, door, user="ada")
        assert [(s.operation, s.ok) for s in steps] == [
            ("read current view", True),
            ("prepare an agent draft", True),
            ("save the draft", True),
            ("start an evaluation", True),
            ("read evaluation progress", True),
            ("open the result", True),
        ], [s.observable for s in steps]
        assert "1 provider setup error" in steps[4].observable
        assert await page.evaluate("window.__sameDocument === true")
        assert await page.text_content('[data-testid="count-provider-error"]') == (
            "1 provider setup error(s)"
        )

        # The panel showed each UI action the agent caused, with its result.
        logged = await page.eval_on_selector_all(
            '[data-testid="assistant-log"] li',
            "items => items.map(i => [i.dataset.action, i.dataset.outcome])",
        )
        assert [a for a, _ in logged] == [
            "read_view",
            "populate_draft",
            "open_view",
            "show_run_progress",
            "open_view",
        ]
        assert {o for _, o in logged} == {"ok"}

        # The gateway recorded every call under the task's owner, with the door it came by.
        identity = await example.gateway.tasks.authenticate(token, Purpose.AGENT)
        records = await example.gateway.store.evidence_for(identity.org_id, identity.task_id)
        calls = [r for r in records if r.get("kind") == "call" and "." in r["tool"]]
        product = [c for c in calls if not c["tool"].startswith("ui.")]
        assert {c["tool"] for c in product} == {
            "dashboard.read_view",
            "agents.prepare_draft",
            "agents.save_draft",
            "evals.start_run",
            "evals.read_progress",
            "evals.open_report",
        }
        assert {c["door"] for c in product} == {door_name}
        assert {c["status"] for c in product} == {"succeeded"}
    finally:
        await context.close()


async def approve_pending(control: Any, org_id: str, admin: str) -> None:
    """An admin of `org_id` approves the first thing its assistants wait for."""
    for _ in range(500):
        pending = await control.pending_approvals(org_id)
        if pending:
            first = pending[0]
            await control.decide(
                org_id, first["task_id"], first["approval_id"], "approve", USERS[admin]
            )
            return
        await asyncio.sleep(0.02)
    raise AssertionError("nothing waited for an admin")


async def test_another_organization_is_refused_in_the_browser(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    store = example.dashboard.store
    agent_id = (await store.list_agents(ADA))[0]["id"]
    suite_id = (await store.list_suites(ADA))[0]["id"]
    run = await example.dashboard.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "gus")
        token = await open_assistant(page, example, "gus")
        # The dashboard itself: Acme's pages do not exist for Globex.
        response = await page.goto(f"{example.dashboard_url}/agents/{agent_id}")
        assert response is not None
        assert response.status == 404
        await page.goto(f"{example.dashboard_url}/agents")
        assert "Support triage" not in await page.content()
        await page.wait_for_selector('#assistant[data-state="connected"]')

        # The tools, through WebMCP from Globex's own tab: all refused, nothing shown.
        attempts = {
            "agents.prepare_draft": {"agent_id": agent_id, "fields": {"instructions": "x"}},
            "agents.save_draft": {"agent_id": agent_id},
            "evals.start_run": {"agent_id": agent_id, "suite_id": suite_id},
            "evals.read_progress": {"run_id": run["run_id"]},
            "evals.open_report": {"run_id": run["run_id"]},
        }
        door = webmcp_door(page)
        control = example.dashboard.control
        assert control is not None
        for tool, data in attempts.items():
            if tool == "agents.save_draft":
                # Every save waits for a person; even approved by Globex's admin, Acme's
                # agent stays out of reach.
                result, _ = await asyncio.gather(
                    door.call(tool, data), approve_pending(control, "org_globex", "gus")
                )
            else:
                result = await door.call(tool, data)
            assert result["status"] != "succeeded", tool
        assert await page.get_attribute("#view", "data-view") == "agents"
        identity = await example.gateway.tasks.authenticate(token, Purpose.AGENT)
        records = await example.gateway.store.evidence_for(identity.org_id, identity.task_id)
        refused = {
            r["tool"]: (r["status"], r["error"]["code"])
            for r in records
            if r.get("kind") == "call" and r["tool"] in attempts
        }
        assert refused == dict.fromkeys(attempts, ("denied", "not_found"))
        assert len(await store.list_runs(ADA)) == 1
        assert (await store.get_agent(ADA, agent_id))["draft"] is None
    finally:
        await context.close()


async def test_the_panel_shows_text_and_comes_back_after_a_full_reload(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        token = await open_assistant(page, example, "ada")
        identity = await example.gateway.tasks.authenticate(token, Purpose.AGENT)
        await example.gateway.pipeline.call(
            identity, "dashboard.read_view", {}, door=GatewayDoor.MCP
        )
        # A proposed change full of markup is shown as text: nothing in it becomes an element.
        hostile = '<img src=x onerror="window.__pwned=1">'
        shown = await example.gateway.pipeline.call(
            identity,
            "ui.display_proposed_change",
            {"title": f"Rename {hostile}", "summary": hostile, "diff": f"- a\n+ {hostile}"},
            door=GatewayDoor.MCP,
        )
        assert shown.ok, shown
        assert await page.text_content("#assistant .proposal-summary") == hostile
        assert await page.text_content("#assistant .proposal-diff") == f"- a\n+ {hostile}"
        assert await page.locator("#assistant img").count() == 0
        assert await page.evaluate("window.__pwned === undefined")

        tab_id = await page.evaluate("window.syntheticAssistant.session.tabId")
        await page.reload()
        # Same task, same tab id, the log of what the agent did is still there.
        await page.wait_for_selector('#assistant[data-state="connected"]')
        assert await page.evaluate("window.syntheticAssistant.session.tabId") == tab_id
        assert await page.text_content('[data-testid="assistant-task"]') == (
            f"Task {identity.task_id}"
        )
        assert await page.locator('[data-testid="assistant-log"] li').count() == 2
        seen = await example.gateway.pipeline.call(
            identity, "dashboard.read_view", {}, door=GatewayDoor.MCP
        )
        assert seen.ok, seen
    finally:
        await context.close()


async def test_the_task_browser_drives_the_sandbox_and_not_the_dashboard(
    example: ExampleStack,
) -> None:
    control = example.dashboard.control
    assert control is not None
    task = await control.task_for("browser-session", USERS["ada"])
    identity = await example.gateway.tasks.authenticate(task.agent_token, Purpose.AGENT)
    assert identity.sandbox.app_origin == example.sandbox_url

    async def call(tool: str, data: dict[str, Any]) -> Any:
        return await example.gateway.pipeline.call(identity, tool, data, door=GatewayDoor.MCP)

    opened = await call("browser.navigate", {"url": f"{example.sandbox_url}/signin"})
    assert opened.ok, opened
    snapshot = await call("browser.snapshot", {})
    assert snapshot.ok, snapshot
    assert "Sandbox instance" in snapshot.output["snapshot"]

    # The dashboard (the user's real records) is not one of the task's origins.
    for url in (f"{example.dashboard_url}/agents", f"{example.gateway_url}/healthz"):
        refused = await call("browser.navigate", {"url": url})
        assert refused.status == "denied", refused
        assert refused.error is not None
        assert refused.error.code == "origin_blocked"


async def test_a_user_runs_an_evaluation_from_the_pages(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        await open_assistant(page, example, "ada")
        await page.evaluate("window.__sameDocument = true")
        await page.click('nav a[href="/suites"]')
        await page.wait_for_selector('#view[data-view="suites"]')
        await page.click('[data-testid="suites"] a')
        await page.wait_for_selector('#view[data-view="suite"]')
        await page.click('[data-testid="run-form"] button[type="submit"]')
        # The run page follows the run live, to its terminal state and its report.
        await page.wait_for_selector('#view[data-view="run"]')
        assert "/runs/run_" in page.url
        await page.wait_for_selector('[data-testid="report-link"]', timeout=15_000)
        assert await page.text_content('[data-testid="run-state"]') == "completed"
        states = await page.eval_on_selector_all(
            '[data-testid="run-scenarios"] tr[data-state]', "rows => rows.map(r => r.dataset.state)"
        )
        assert states == ["passed", "failed", "failed", "provider_error"]
        await page.click('[data-testid="report-link"]')
        await page.wait_for_selector('#view[data-view="report"]')
        await page.go_back()
        await page.wait_for_selector('#view[data-view="run"]')
        assert await page.evaluate("window.__sameDocument === true")
        assert await page.get_attribute("#assistant", "data-state") == "connected"
    finally:
        await context.close()


async def test_every_tool_of_the_example_is_listed_under_a_client_safe_name(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    """Both official SDK clients list the example's tools (the app's and the gateway's),
    each under a name Claude Desktop, Codex and Copilot accept."""
    ensure_installed()
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        token = await open_assistant(page, example, "ada")
        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
            Client(streamable_http_client(f"{example.gateway_url}/v1/mcp", http_client=http)) as c,
        ):
            python_names = sorted(t.name for t in (await c.list_tools()).tools)
        listed = await ts_agent(
            {"url": f"{example.gateway_url}/v1/mcp", "token": token, "scenario": "list"}
        )
    finally:
        await context.close()
    assert sorted(listed["names"]) == python_names
    assert {"agents_save_draft", "evals_start_run", "ui_read_view", "browser_navigate"} <= set(
        python_names
    )
    bad = [n for n in python_names if not CLIENT_SAFE.fullmatch(n)]
    assert bad == []
