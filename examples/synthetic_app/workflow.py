"""The first workflow, as a script: the six operations, each checked where a user sees it.

A `Door` calls a tool the way an agent would (the MCP client with the task's agent token,
or an external browser agent through WebMCP) and returns the call's public result. After
each call the workflow reads the dashboard tab (the DOM, through Playwright) and the app's
store, and records whether the operation's observable result is really there. Used by
`gateway demo` and by the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from examples.synthetic_app.control import SAVE_TOOL
from examples.synthetic_app.serve import ExampleStack
from examples.synthetic_app.store import Who, who
from gateway.core.registry import exposed_name
from gateway.core.tokens import Purpose

CallFn = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

# Covers two of the suite's expectations but not escalation: the run shows a passed answer,
# an incorrect one, and a provider setup error side by side.
INSTRUCTIONS = "Greet the customer and offer a refund when the policy allows it."


@dataclass(frozen=True)
class Door:
    name: str
    call: CallFn


@dataclass
class Step:
    operation: str
    tool: str
    door: str
    status: str
    observable: str
    seconds: float
    ok: bool


class Missed(AssertionError):
    """An operation whose observable result is not there."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Missed(what)


@contextlib.asynccontextmanager
async def mcp_door(gateway_url: str, agent_token: str) -> AsyncIterator[Door]:
    """The official MCP client, speaking to the gateway's MCP door with the agent token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from mcp import Client

    headers = {"authorization": f"Bearer {agent_token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
        Client(streamable_http_client(f"{gateway_url}/v1/mcp", http_client=http)) as client,
    ):

        async def call(tool: str, data: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, data)
            structured: dict[str, Any] = dict(result.structured_content or {})
            return structured

        yield Door("mcp", call)


def webmcp_door(page: Any) -> Door:
    """An external browser agent: Playwright's WebMCP client calling the page's tools."""

    async def call(tool: str, data: dict[str, Any]) -> dict[str, Any]:
        try:
            # The page lists each tool under its client-safe name, as MCP does.
            output = await page.webmcp.call_tool(exposed_name(tool), data)
        except Exception as exc:  # WebMCP surfaces a non-success as a thrown error
            return {"tool": tool, "status": "failed", "error": {"message": str(exc)[:300]}}
        if isinstance(output, str):
            with contextlib.suppress(ValueError):
                output = json.loads(output)
        return {"tool": tool, "status": "succeeded", "output": output}

    return Door("webmcp", call)


async def sign_in(page: Any, dashboard_url: str, user: str) -> None:
    await page.goto(f"{dashboard_url}/signin")
    await page.click(f'[data-testid="signin-{user}"]')
    await page.wait_for_url("**/agents")


async def open_assistant(page: Any, stack: ExampleStack, user: str) -> str:
    """Open the panel (the page gets its tab token from the dashboard's session) and return
    the agent token the control plane holds for that task."""
    await page.click('[data-testid="assistant-open"]')
    await page.wait_for_selector('#assistant[data-state="connected"]')
    control = stack.dashboard.control
    assert control is not None
    task = control.latest_for_user(user)
    assert task is not None
    # The agent token is for this very task, and the task is this user's.
    identity = await stack.gateway.tasks.authenticate(task.agent_token, Purpose.AGENT)
    expect(identity.actor.id == user, "the task belongs to the signed-in user")
    return task.agent_token


async def run_workflow(
    stack: ExampleStack, page: Any, door: Door, *, user: str = "ada"
) -> list[Step]:
    """The six operations in order; stops at the first one that missed its result."""
    control = stack.dashboard.control
    assert control is not None
    task = control.latest_for_user(user)
    assert task is not None
    w: Who = who(task.org_id, user)
    store = stack.dashboard.store
    agent_id = (await store.list_agents(w))[0]["id"]
    suite_id = (await store.list_suites(w))[0]["id"]
    steps: list[Step] = []
    state: dict[str, Any] = {}

    async def step(
        operation: str,
        tool: str,
        data: dict[str, Any],
        check: Callable[[dict[str, Any]], Awaitable[str]],
    ) -> bool:
        started = time.perf_counter()
        if tool == SAVE_TOOL:
            # Every save waits for a person (the dashboard's task policy): the user answers
            # while the agent's call waits.
            result, state["approved_by"] = await asyncio.gather(
                door.call(tool, data), approve_as_person(page, stack, door)
            )
        else:
            result = await door.call(tool, data)
        status = str(result.get("status", "?"))
        try:
            expect(status == "succeeded", f"{tool} ended {status}: {result.get('error')}")
            observable = await check(result.get("output") or {})
            ok = True
        except Missed as exc:
            observable, ok = f"MISSED: {exc}", False
        steps.append(
            Step(operation, tool, door.name, status, observable, time.perf_counter() - started, ok)
        )
        return ok

    async def dom_view() -> str | None:
        value: str | None = await page.get_attribute("#view", "data-view")
        return value

    async def read_view(out: dict[str, Any]) -> str:
        expect(out.get("view") == await dom_view(), "the view read is the one shown")
        org = out["context"]["org"]
        expect(org["id"] == w.org_id, "the context is the user's organization")
        tools = out["available_actions"]["tools"]
        return f"view '{out['view']}' of {org['name']} as {w.role}; {len(tools)} tools allowed"

    async def prepare(out: dict[str, Any]) -> str:
        expect(await dom_view() == "agent_builder", "the builder is open")
        shown = await page.input_value('[data-testid="draft-instructions"]')
        expect(shown == INSTRUCTIONS, "the builder shows the instructions")
        expect(await page.input_value('[data-testid="draft-model"]') == "sim-large", "model")
        expect(await page.is_checked('[data-testid="tool-refund"]'), "the refund tool is on")
        draft = (await store.get_agent(w, agent_id))["draft"]
        expect(draft is not None and draft["instructions"] == INSTRUCTIONS, "draft stored")
        return (
            f"builder shows the draft of {agent_id}: sim-large, {', '.join(out['draft']['tools'])}"
        )

    async def save(out: dict[str, Any]) -> str:
        version_id = out["version_id"]
        selector = f'[data-testid="current-version"][data-version-id="{version_id}"]'
        await page.wait_for_selector(selector, timeout=5000)
        agent = await store.get_agent(w, agent_id)
        expect(agent["current_version"]["id"] == version_id, "the version is persisted")
        expect(agent["draft"] is None, "the draft became the version")
        state["version_id"] = version_id
        # The newest of the task's approvals is this save's (a task may run the workflow
        # more than once).
        approvals = await stack.gateway.approvals.listing(task.task_id)
        expect(bool(approvals), "the save asked for an approval")
        approval = approvals[-1]
        expect(approval["tool"] == "agents.save_draft", "the approval is the save's")
        expect(approval["status"] == "approved", "the save was approved before it ran")
        return (
            f"{agent_id} v{out['version']} saved as {version_id} once approved "
            f"{state['approved_by']}; builder refreshed"
        )

    async def start(out: dict[str, Any]) -> str:
        expect(out["state"] == "queued", "a new run is queued, not passed")
        run = await store.get_run(w, out["run_id"])
        expect(run["version_id"] == state["version_id"], "the saved version is evaluated")
        state["run_id"] = out["run_id"]
        await page.wait_for_selector(
            f'#assistant .run-progress[data-run-id="{out["run_id"]}"]', timeout=5000
        )
        budget = out["budget"]["per_scenario"]["max_tokens"]
        return f"{out['run_id']} queued: {len(out['scenarios'])} scenarios, {budget} tokens each"

    async def progress(out: dict[str, Any]) -> str:
        run_id = state["run_id"]
        deadline = time.monotonic() + 60
        while not out["terminal"] and time.monotonic() < deadline:
            again = await door.call("evals.read_progress", {"run_id": run_id, "wait_s": 2})
            expect(again.get("status") == "succeeded", "progress stays readable")
            out = again["output"]
        expect(out["terminal"], "the run reached a terminal state")
        counts = out["counts"]
        kinds = {s["state"] for s in out["scenarios"]}
        expect(kinds <= {"passed", "failed", "provider_error"}, "every scenario has a verdict")
        expect(
            all(
                s["reason"] == "provider_setup"
                for s in out["scenarios"]
                if s["state"] == "provider_error"
            ),
            "provider setup errors are reported as such",
        )
        box = f'#assistant .run-progress[data-run-id="{run_id}"][data-state="{out["state"]}"]'
        await page.wait_for_selector(box, timeout=5000)
        wrong = sum(1 for s in out["scenarios"] if s["reason"] == "incorrect_answer")
        return (
            f"{out['state']} (terminal): {counts['passed']} passed, {wrong} incorrect answer, "
            f"{counts['provider_error']} provider setup error"
        )

    async def report(out: dict[str, Any]) -> str:
        expect(await dom_view() == "report", "the report is open")
        shown = await page.get_attribute('[data-testid="report"]', "data-run-id")
        expect(shown == state["run_id"], "it is the report of this run")
        report_id = await page.text_content('[data-testid="report-id"]')
        expect(report_id == out["report_id"], "the exact report is shown")
        panel = await page.get_attribute("#assistant", "data-state")
        expect(panel == "connected", "the assistant stays available")
        return f"report {report_id} shown; assistant still connected"

    plan: list[tuple[str, str, dict[str, Any], Callable[[dict[str, Any]], Awaitable[str]]]] = [
        ("read current view", "dashboard.read_view", {}, read_view),
        (
            "prepare an agent draft",
            "agents.prepare_draft",
            {
                "agent_id": agent_id,
                "fields": {
                    "instructions": INSTRUCTIONS,
                    "model": "sim-large",
                    "tools": ["refund", "handoff", "lookup_order"],
                },
            },
            prepare,
        ),
        ("save the draft", "agents.save_draft", {"agent_id": agent_id}, save),
        (
            "start an evaluation",
            "evals.start_run",
            {"agent_id": agent_id, "suite_id": suite_id, "budget": {"max_tokens": 4000}},
            start,
        ),
        ("read evaluation progress", "evals.read_progress", {"run_id": ""}, progress),
        ("open the result", "evals.open_report", {"run_id": ""}, report),
    ]
    for operation, tool, data, check in plan:
        if "run_id" in data:
            data = {**data, "run_id": state.get("run_id", "run_0")}
        if not await step(operation, tool, data, check):
            break
    return steps


async def approve_as_person(page: Any, stack: ExampleStack, door: Door) -> str:
    """What the signed-in person does when the assistant asks to save: approve it in the
    panel with a key press, or, for a call the page's own WebMCP made (which that tab may
    not approve), on the admin page. Returns where it was approved."""
    if door.name != "webmcp":
        host = "#assistant-approvals [data-gateway-approval]"
        # Its buttons take an answer once it has held still in view (`data-ready`).
        await page.wait_for_selector(f"{host}[data-ready]", state="attached", timeout=10_000)
        # Focus lands on Deny; Tab moves to "Approve once".
        await page.focus(host)
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")
        return "in the assistant panel"
    # The same person, signed in, in a second window of the same browser.
    session = await page.context.storage_state()
    window = await page.context.browser.new_context(storage_state=session)
    admin = await window.new_page()
    try:
        for _ in range(50):
            await admin.goto(f"{stack.dashboard_url}/admin/approvals")
            button = admin.locator('[data-testid^="approve-"]')
            if await button.count():
                await button.first.click()
                await admin.wait_for_load_state()
                return "on the admin page"
            await asyncio.sleep(0.2)
        raise Missed("no approval reached the admin page")
    finally:
        await window.close()


def table(steps: list[Step]) -> str:
    rows = [("operation", "door", "status", "observable result", "time")]
    rows += [
        (s.operation, s.door, s.status, s.observable, f"{s.seconds * 1000:.0f} ms") for s in steps
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(cell.ljust(widths[j]) if j < 4 else cell for j, cell in enumerate(row))
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)
