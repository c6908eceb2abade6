"""The first workflow end to end in real Chromium: a signed-in user, the assistant panel on
the gateway's tab channel, and the six operations with their results in the DOM and the
store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from examples.synthetic_app.serve import ExampleStack, running_stack
from examples.synthetic_app.store import who

from gateway.identity import TaskIdentity
from gateway.results import Door, ToolResult
from gateway.settings import Settings
from gateway.tokens import Purpose

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ADA = who("org_acme", "ada")


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    from gateway.chromium import find_chromium, launch_args

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=find_chromium(), args=launch_args(webmcp=True)
        )
        yield browser
        await browser.close()


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        secret_keys=["k-e2e-newest-0123456789abcdef"],
        control_key="control-key-for-e2e-0123456789",
        example=True,
    )
    async with running_stack(settings, step_s=0.05) as stack:
        yield stack


async def signed_in_page(browser: Any, stack: ExampleStack, user: str) -> tuple[Any, Any]:
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(stack.dashboard_url + "/signin")
    await page.click(f'[data-testid="signin-{user}"]')
    await page.wait_for_url("**/agents")
    return context, page


async def open_assistant(page: Any, stack: ExampleStack, user: str) -> TaskIdentity:
    await page.click('[data-testid="assistant-open"]')
    await page.wait_for_selector('#assistant[data-state="connected"]')
    control = stack.dashboard.control
    assert control is not None
    task = control.latest_for_user(user)
    assert task is not None
    return await stack.gateway.tasks.authenticate(task.agent_token, Purpose.AGENT)


async def call(stack: ExampleStack, identity: TaskIdentity, tool: str, data: Any) -> ToolResult:
    return await stack.gateway.pipeline.call(identity, tool, data, door=Door.MCP)


async def test_the_first_workflow_in_a_real_dashboard(chromium: Any, example: ExampleStack) -> None:
    context, page = await signed_in_page(chromium, example, "ada")
    try:
        identity = await open_assistant(page, example, "ada")
        assert (identity.org_id, identity.actor.id, identity.actor.role) == (
            "org_acme",
            "ada",
            "admin",
        )
        # The tab token came through the session, never a URL.
        assert "token" not in page.url
        # A marker that a full page load would wipe: the panel must survive every view change.
        await page.evaluate("window.__sameDocument = true")
        agent_id = (await example.dashboard.store.list_agents(ADA))[0]["id"]
        suite_id = (await example.dashboard.store.list_suites(ADA))[0]["id"]

        # 1. read current view
        seen = await call(example, identity, "dashboard.read_view", {})
        assert seen.ok, seen
        assert seen.output["view"] == "agents"
        assert seen.output["context"]["org"]["id"] == "org_acme"

        # 2. prepare a draft: the builder shows it
        instructions = "Greet the customer, offer a refund, escalate when angry."
        drafted = await call(
            example,
            identity,
            "agents.prepare_draft",
            {
                "agent_id": agent_id,
                "fields": {
                    "instructions": instructions,
                    "model": "sim-large",
                    "tools": ["refund", "handoff"],
                },
            },
        )
        assert drafted.ok, drafted
        assert await page.get_attribute("#view", "data-view") == "agent_builder"
        assert await page.input_value('[data-testid="draft-instructions"]') == instructions
        assert await page.input_value('[data-testid="draft-model"]') == "sim-large"
        assert await page.is_checked('[data-testid="tool-refund"]')
        assert not await page.is_checked('[data-testid="tool-search_docs"]')
        assert await page.is_visible('[data-testid="populated-note"]')
        assert (await example.dashboard.store.get_agent(ADA, agent_id))["draft"] is not None

        # 3. save it: the persisted version, the builder refreshed
        saved = await call(example, identity, "agents.save_draft", {"agent_id": agent_id})
        assert saved.ok, saved
        version_id = saved.output["version_id"]
        await page.wait_for_selector(
            f'[data-testid="current-version"][data-version-id="{version_id}"]'
        )
        assert await page.get_attribute('[data-testid="draft-state"]', "data-draft") == "none"
        stored = await example.dashboard.store.get_agent(ADA, agent_id)
        assert stored["current_version"]["id"] == version_id

        # 4. start an evaluation: a queued run, its progress in the panel
        started = await call(
            example,
            identity,
            "evals.start_run",
            {"agent_id": agent_id, "suite_id": suite_id, "budget": {"max_tokens": 4000}},
        )
        assert started.ok, started
        assert started.output["state"] == "queued"
        run_id = started.output["run_id"]
        box = f'#assistant .run-progress[data-run-id="{run_id}"]'
        await page.wait_for_selector(box)

        # 5. read progress to its terminal state; the panel shows the same
        for _ in range(60):
            progress = await call(
                example, identity, "evals.read_progress", {"run_id": run_id, "wait_s": 2}
            )
            assert progress.ok, progress
            if progress.output["terminal"]:
                break
        assert progress.output["state"] == "completed"
        verdicts = {s["name"]: s["state"] for s in progress.output["scenarios"]}
        assert verdicts["Reads a photo of the parcel"] == "provider_error"
        assert verdicts["Greets the customer"] == "passed"
        await page.wait_for_selector(f'{box}[data-state="completed"]')
        assert await page.locator(f'{box} li[data-state="provider_error"]').count() == 1

        # 6. open the result: the exact report, the assistant still there
        opened = await call(example, identity, "evals.open_report", {"run_id": run_id})
        assert opened.ok, opened
        assert await page.get_attribute("#view", "data-view") == "report"
        assert await page.get_attribute('[data-testid="report"]', "data-run-id") == run_id
        assert await page.text_content('[data-testid="report-id"]') == opened.output["report_id"]
        assert await page.text_content('[data-testid="count-provider-error"]') == (
            "1 provider setup errors"
        )
        assert await page.evaluate("window.__sameDocument === true")
        assert await page.get_attribute("#assistant", "data-state") == "connected"
        logged = await page.eval_on_selector_all(
            '[data-testid="assistant-log"] li', "items => items.map(i => i.dataset.action)"
        )
        assert logged == [
            "read_view",
            "populate_draft",
            "open_view",
            "show_run_progress",
            "open_view",
        ]
        outcomes = await page.eval_on_selector_all(
            '[data-testid="assistant-log"] li', "items => items.map(i => i.dataset.outcome)"
        )
        assert set(outcomes) == {"ok"}
    finally:
        await context.close()
