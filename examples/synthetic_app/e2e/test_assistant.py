"""The assistant in the example dashboard, tested as an app team tests theirs: a task for a
signed-in user, the dashboard page connected to it, an agent driving it through a door,
and the gateway's evidence checked afterwards."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from examples.synthetic_app.e2e.conftest import assistant_task
from examples.synthetic_app.serve import ExampleStack
from gateway.testing.agents import McpAgent
from gateway.testing.dashboard import DashboardPage
from gateway.testing.evidence import Evidence
from gateway.testing.pytest_plugin import GatewayHandle, TaskFactory
from gateway.testing.script import Step, run_script

# Each test's own task: the one the dashboard's control plane makes for that user.
ADAS_TASK: pytest.MarkDecorator = pytest.mark.gateway_task(**assistant_task("ada"))
MAXS_TASK: pytest.MarkDecorator = pytest.mark.gateway_task(**assistant_task("max"))
GUSS_TASK: pytest.MarkDecorator = pytest.mark.gateway_task(**assistant_task("gus"))
INSTRUCTIONS = "Greet the customer and offer a refund when the policy allows it."


def first_agent(dashboard: DashboardPage) -> str:
    agent_id: str = dashboard.page.get_attribute("tr[data-agent-id]", "data-agent-id")
    return agent_id


def prepare(agent_id: str) -> Step:
    fields = {"instructions": INSTRUCTIONS, "model": "sim-large", "tools": ["refund"]}
    return Step("agents.prepare_draft", {"agent_id": agent_id, "fields": fields})


@ADAS_TASK
def test_the_assistant_fills_the_draft_and_the_admin_approves_the_save(
    dashboard_page: DashboardPage, mcp_agent: McpAgent, evidence: Evidence
) -> None:
    page = dashboard_page.page
    agent_id = first_agent(dashboard_page)
    report = run_script(
        mcp_agent,
        [
            Step("dashboard.read_view", expect={"view": "agents"}),
            prepare(agent_id),
        ],
    )
    report.assert_ok()
    # The builder shows what the agent prepared, as text in the page's own fields.
    assert page.input_value('[data-testid="draft-instructions"]') == INSTRUCTIONS

    # The save waits for the admin: answered in the panel, with the keyboard.
    saved: dict[str, Any] = {}
    saving = threading.Thread(
        target=lambda: saved.update(mcp_agent.call("agents.save_draft", {"agent_id": agent_id}))
    )
    saving.start()
    # Its buttons take an answer once it has held still in view.
    ready = "#assistant-approvals [data-gateway-approval][data-ready]"
    page.wait_for_selector(ready, state="attached")
    page.focus("#assistant-approvals [data-gateway-approval]")
    page.keyboard.press("Tab")  # from Deny to Approve once
    page.keyboard.press("Enter")
    saving.join(timeout=60)
    assert saved["status"] == "succeeded", saved
    version_id = saved["output"]["version_id"]
    page.wait_for_selector(f'[data-testid="current-version"][data-version-id="{version_id}"]')

    evidence.assert_called("agents.prepare_draft", door="mcp")
    evidence.assert_called("agents.save_draft", door="mcp", output={"version_id": version_id})
    [decided] = evidence.records("approval.decided")
    assert decided["data"]["approver"]["id"] == "ada"


@MAXS_TASK
def test_a_members_save_waits_for_the_control_plane(
    dashboard_page: DashboardPage,
    bridge_client: Any,
    gateway: GatewayHandle,
    gateway_task: TaskFactory,
    evidence: Evidence,
) -> None:
    agent_id = first_agent(dashboard_page)
    run_script(bridge_client, [prepare(agent_id)]).assert_ok()
    task = gateway_task()
    saved: dict[str, Any] = {}
    saving = threading.Thread(
        target=lambda: saved.update(bridge_client.call("agents.save_draft", {"agent_id": agent_id}))
    )
    saving.start()
    pending: list[dict[str, Any]] = []
    for _ in range(200):
        pending = [a for a in gateway.control.approvals(task.task_id) if a["status"] == "pending"]
        if pending or not saving.is_alive():
            break
        threading.Event().wait(0.05)
    assert pending, (saved.get("status"), saved.get("error"))
    [approval] = pending
    assert approval["by"] == "control"  # a member's panel shows it, without buttons
    gateway.control.decide(task.task_id, approval["approval_id"], approver="ada")
    saving.join(timeout=60)
    assert saved["status"] == "succeeded", saved
    evidence.assert_called("agents.save_draft", door="bridge")


@GUSS_TASK
def test_another_organizations_agent_is_out_of_reach_through_every_door(
    dashboard_page: DashboardPage,
    mcp_agent: McpAgent,
    evidence: Evidence,
    new_context: Any,
    example: ExampleStack,
) -> None:
    # An agent of Acme, as Acme's admin sees it in another browser context.
    acme = new_context().new_page()
    acme.goto(f"{example.dashboard_url}/signin")
    acme.click('[data-testid="signin-ada"]')
    acme.wait_for_url("**/agents")
    acme_agent = acme.get_attribute("tr[data-agent-id]", "data-agent-id")
    step = Step(
        "agents.prepare_draft",
        {"agent_id": acme_agent, "fields": {"instructions": "x"}},
        status="denied",
        error_code="not_found",
    )
    for agent in (mcp_agent, dashboard_page.webmcp()):
        run_script(agent, [step]).assert_ok()
    assert len(evidence.calls("agents.prepare_draft", status="denied")) == 2
    # Gus's own dashboard never showed Acme's agent.
    assert dashboard_page.page.locator(f'tr[data-agent-id="{acme_agent}"]').count() == 0
