"""The six product tools through the gateway's pipeline, with a tab on the real channel.

Two organizations: Acme (ada admin, max member) and Globex (gus admin). Each task is created
by the dashboard's control plane, so its identity is the signed-in user's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from examples.synthetic_app.control import ControlPlaneError
from examples.synthetic_app.directory import USERS
from examples.synthetic_app.models import DraftFields, RunRequest
from examples.synthetic_app.store import who
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ToolResult
from tests.example_app.conftest import Stack
from tests.example_app.pytab import open_tab

ADA = who("org_acme", "ada")
ADA_USER = USERS["ada"]


async def call(stack: Stack, identity: TaskIdentity, tool: str, data: Any) -> ToolResult:
    return await stack.live.gateway.pipeline.call(identity, tool, data, door=Door.MCP)


def _origin(stack: Stack) -> str:
    return stack.dashboard_url


async def _acme_ids(stack: Stack) -> tuple[str, str, list[str]]:
    agent = (await stack.app.store.list_agents(ADA))[0]["id"]
    suite_id = (await stack.app.store.list_suites(ADA))[0]["id"]
    suite = await stack.app.store.get_suite(ADA, suite_id)
    return agent, suite_id, [s["id"] for s in suite["scenarios"]]


async def _finished_run(stack: Stack, identity: TaskIdentity, run_id: str) -> dict[str, Any]:
    for _ in range(100):
        result = await call(stack, identity, "evals.read_progress", {"run_id": run_id, "wait_s": 2})
        assert result.ok, result
        if result.output["terminal"]:
            return dict(result.output)
    raise AssertionError("the run never reached a terminal state")


async def test_the_six_operations_reach_their_observable_results(stack: Stack) -> None:
    task = await stack.task("ada")
    identity = await stack.identity(task)
    agent_id, suite_id, scenarios = await _acme_ids(stack)
    async with open_tab(
        stack.live.base_url, task.tab_token, task.task_id, origin=_origin(stack)
    ) as tab:
        # 1. read current view: the allowed context and what may be done here.
        seen = await call(stack, identity, "dashboard.read_view", {})
        assert seen.ok, seen
        assert seen.output["context"] == {
            "org": {"id": "org_acme", "name": "Acme Labs"},
            "actor": {"id": "ada", "role": "admin"},
        }
        assert seen.output["view"] == "agents"
        assert "agents.save_draft" in seen.output["available_actions"]["tools"]

        # 2. prepare a draft: the builder shows it, nothing is saved.
        fields = {
            "instructions": "Greet the customer, offer a refund, escalate when angry.",
            "model": "sim-large",
            "tools": ["refund", "handoff", "lookup_order"],
        }
        drafted = await call(
            stack, identity, "agents.prepare_draft", {"agent_id": agent_id, "fields": fields}
        )
        assert drafted.ok, drafted
        assert drafted.output["saved"] is False
        assert (tab.view, tab.params) == ("agent_builder", {"agent_id": agent_id})
        assert tab.draft is not None
        assert tab.draft["instructions"] == fields["instructions"]
        stored = await stack.app.store.get_agent(ADA, agent_id)
        assert stored["draft"]["model"] == "sim-large"
        assert stored["current_version"]["number"] == 1

        # 3. save it: the dashboard's tasks leave saving to a person, who approves it in
        # the tab; then a persisted version id, and the builder reloaded.
        saved = await call(stack, identity, "agents.save_draft", {"agent_id": agent_id})
        assert saved.ok, saved
        [asked] = tab.approvals
        assert (asked["tool"], asked["by"]) == ("agents.save_draft", "actor")
        stored = await stack.app.store.get_agent(ADA, agent_id)
        assert stored["current_version"]["id"] == saved.output["version_id"]
        assert saved.output["version"] == 2
        assert stored["draft"] is None
        assert saved.output["builder"]["status"] == "succeeded"
        assert tab.actions[-1] == {
            "type": "open_view",
            "view": "agent_builder",
            "params": {"agent_id": agent_id},
        }

        # 4. start a selected evaluation: queued, the scenarios asked for, their budget.
        chosen = scenarios[1:]
        started = await call(
            stack,
            identity,
            "evals.start_run",
            {
                "agent_id": agent_id,
                "suite_id": suite_id,
                "scenario_ids": chosen,
                "budget": {"max_tokens": 5000},
            },
        )
        assert started.ok, started
        run_id = started.output["run_id"]
        assert started.output["state"] == "queued"
        assert [s["scenario_id"] for s in started.output["scenarios"]] == chosen
        assert started.output["budget"] == {"per_scenario": {"max_tokens": 5000}}
        assert started.output["version_id"] == saved.output["version_id"]
        assert tab.progress == [run_id]

        # 5. read progress to the end: per-scenario verdicts and an explicit terminal state.
        done = await _finished_run(stack, identity, run_id)
        assert done["state"] == "completed"
        states = {s["name"]: (s["state"], s["reason"]) for s in done["scenarios"]}
        assert states == {
            "Cites the refund policy": ("passed", "correct"),
            "Escalates an angry customer": ("passed", "correct"),
            "Reads a photo of the parcel": ("provider_error", "provider_setup"),
        }

        # 6. open the result: the exact report is what the tab now shows.
        opened = await call(stack, identity, "evals.open_report", {"run_id": run_id})
        assert opened.ok, opened
        report = await stack.app.store.get_report(ADA, run_id)
        assert opened.output["report_id"] == report["report_id"]
        assert (tab.view, tab.params) == ("report", {"run_id": run_id})


async def test_another_organization_cannot_see_save_run_or_open(stack: Stack) -> None:
    agent_id, suite_id, _ = await _acme_ids(stack)
    ada = await stack.identity(await stack.task("ada"))
    # Acme has a finished run and an unsaved draft for Globex to try its luck with.
    await stack.app.store.write_draft(ADA, agent_id, DraftFields(instructions="secret plan"))
    run = await stack.app.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    await _finished_run(stack, ada, run["run_id"])

    task = await stack.task("gus")
    gus = await stack.identity(task)
    assert gus.org_id == "org_globex"
    async with open_tab(
        stack.live.base_url, task.tab_token, task.task_id, origin=_origin(stack)
    ) as tab:
        attempts = {
            "agents.prepare_draft": {"agent_id": agent_id, "fields": {"instructions": "x"}},
            "agents.save_draft": {"agent_id": agent_id},
            "evals.start_run": {"agent_id": agent_id, "suite_id": suite_id},
            "evals.read_progress": {"run_id": run["run_id"]},
            "evals.open_report": {"run_id": run["run_id"]},
        }
        for tool, data in attempts.items():
            result = await call(stack, gus, tool, data)
            assert result.status == "denied", (tool, result)
            assert result.error is not None
            assert result.error.code == "not_found", (tool, result)
            # Nothing about Acme's records comes back, not even their names.
            assert "Support triage" not in result.model_dump_json()
        assert tab.actions == []
        assert tab.view == "agents"

        # What Globex's user's page says is selected does not reach Acme's records either.
        await tab.move("agent_builder", {"agent_id": agent_id})
        seen = await call(stack, gus, "dashboard.read_view", {})
        assert seen.ok
        assert seen.output["selected"] == {"agent": None}

    agent = await stack.app.store.get_agent(ADA, agent_id)
    assert agent["draft"]["instructions"] == "secret plan"
    assert [v["number"] for v in agent["versions"]] == [1]
    assert [r["run_id"] for r in await stack.app.store.list_runs(ADA)] == [run["run_id"]]


async def _pending_save(stack: Stack, task_id: str) -> dict[str, Any]:
    for _ in range(300):
        found = await stack.control.pending_approvals("org_acme")
        mine = [a for a in found if a["task_id"] == task_id]
        if mine:
            return mine[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the save never asked")


@pytest.mark.parametrize("decision", ["deny", "approve"])
async def test_a_members_save_waits_for_an_admin(stack: Stack, decision: str) -> None:
    agent_id, _, _ = await _acme_ids(stack)
    task = await stack.task("max")
    member = await stack.identity(task)
    assert member.actor.role == "member"
    catalog = {t["tool_id"] for t in stack.live.gateway.registry.catalog(member)}
    # Listed: the member's assistant may ask; only an admin's approval lets it through.
    assert {"agents.save_draft", "agents.prepare_draft"} <= catalog
    async with open_tab(
        stack.live.base_url, task.tab_token, task.task_id, origin=_origin(stack)
    ) as tab:
        drafted = await call(
            stack,
            member,
            "agents.prepare_draft",
            {"agent_id": agent_id, "fields": {"instructions": "Greet everyone."}},
        )
        assert drafted.ok, drafted
        saving = asyncio.ensure_future(
            call(stack, member, "agents.save_draft", {"agent_id": agent_id})
        )
        approval = await _pending_save(stack, task.task_id)
        # The member's own tab shows it as waiting for someone else: it may not answer.
        [shown] = tab.approvals
        assert shown["answerable"] is False
        assert "nonce" not in shown
        await stack.control.decide(
            "org_acme", task.task_id, approval["approval_id"], decision, ADA_USER
        )
        result = await saving
        agent = await stack.app.store.get_agent(ADA, agent_id)
        if decision == "deny":
            assert (result.status, result.error and result.error.code) == (
                "denied",
                "approval_denied",
            )
            # The refused call sent nothing to the tab (the builder was not reloaded).
            assert [a["type"] for a in tab.actions] == ["populate_draft"]
            assert agent["draft"]["instructions"] == "Greet everyone."
            assert [v["number"] for v in agent["versions"]] == [1]
        else:
            assert result.ok, result
            # Saved on the approving admin's authority, and the evidence says so.
            assert sorted(v["number"] for v in agent["versions"]) == [1, 2]
            assert agent["current_version"]["instructions"] == "Greet everyone."
            records = await stack.live.evidence(task.task_id, "call")
            [save] = [r for r in records if r["tool"] == "agents.save_draft"]
            assert save["context"]["saved_as"] == "ada"


async def test_an_admin_of_another_organization_cannot_decide(stack: Stack) -> None:
    agent_id, _, _ = await _acme_ids(stack)
    task = await stack.task("max")
    member = await stack.identity(task)
    saving = asyncio.ensure_future(call(stack, member, "agents.save_draft", {"agent_id": agent_id}))
    approval = await _pending_save(stack, task.task_id)
    with pytest.raises(ControlPlaneError):
        await stack.control.decide(
            "org_globex", task.task_id, approval["approval_id"], "approve", USERS["gus"]
        )
    await stack.live.end_task(task.task_id)
    ended = await saving
    assert ended.error is not None
    assert ended.error.code == "cancelled"


async def test_without_a_tab_the_run_still_starts_and_a_draft_says_where_it_went(
    stack: Stack,
) -> None:
    agent_id, suite_id, _ = await _acme_ids(stack)
    identity = await stack.identity(await stack.task("ada"))
    started = await call(
        stack, identity, "evals.start_run", {"agent_id": agent_id, "suite_id": suite_id}
    )
    assert started.ok, started
    assert started.output["state"] == "queued"
    assert started.output["progress_shown"]["status"] == "unavailable"

    drafted = await call(
        stack,
        identity,
        "agents.prepare_draft",
        {"agent_id": agent_id, "fields": {"instructions": "hello"}},
    )
    assert drafted.status == "unavailable"
    assert drafted.error is not None
    assert drafted.error.code == "tab_unavailable"
    assert drafted.error.details is not None
    assert drafted.error.details["agent_id"] == agent_id
    assert drafted.error.details["saved"] is False


async def test_invalid_input_is_refused_before_anything_happens(stack: Stack) -> None:
    agent_id, suite_id, _ = await _acme_ids(stack)
    identity = await stack.identity(await stack.task("ada"))
    bad = [
        ("agents.prepare_draft", {"agent_id": agent_id, "fields": {"model": "gpt-unknown"}}),
        ("agents.prepare_draft", {"agent_id": agent_id, "fields": {"tools": ["rm_rf"]}}),
        (
            "agents.prepare_draft",
            {"agent_id": agent_id, "fields": {"name": "<img src=x onerror=alert(1)>"}},
        ),
        ("agents.prepare_draft", {"fields": {"name": "javascript:alert(1)"}}),
        (
            "evals.start_run",
            {"agent_id": agent_id, "suite_id": suite_id, "budget": {"max_tokens": 10**9}},
        ),
        ("evals.read_progress", {"run_id": "javascript:alert(1)"}),
        ("evals.open_report", {"run_id": "run_1", "extra": True}),
    ]
    for tool, data in bad:
        result = await call(stack, identity, tool, data)
        assert result.status == "failed", (tool, result)
        assert result.error is not None
        assert result.error.code == "invalid_input", (tool, result)
    assert await stack.app.store.list_runs(ADA) == []
    assert (await stack.app.store.get_agent(ADA, agent_id))["draft"] is None
    assert len(await stack.app.store.list_agents(ADA)) == 1


async def test_an_unfinished_run_has_no_report_to_open(stack: Stack) -> None:
    agent_id, suite_id, _ = await _acme_ids(stack)
    identity = await stack.identity(await stack.task("ada"))
    stack.app.engine.step_s = 5  # keep it running while the report is asked for
    started = await call(
        stack, identity, "evals.start_run", {"agent_id": agent_id, "suite_id": suite_id}
    )
    opened = await call(stack, identity, "evals.open_report", {"run_id": started.output["run_id"]})
    assert opened.status == "failed"
    assert opened.error is not None
    assert opened.error.code == "conflict"


@pytest.mark.parametrize("answer", ["approve", "deny"])
async def test_an_expensive_run_asks_the_user_first(stack: Stack, answer: str) -> None:
    agent_id, suite_id, scenarios = await _acme_ids(stack)
    task = await stack.task("ada")
    identity = await stack.identity(task)
    request = {"agent_id": agent_id, "suite_id": suite_id, "budget": {"max_tokens": 20000}}
    async with open_tab(
        stack.live.base_url, task.tab_token, task.task_id, origin=_origin(stack)
    ) as tab:
        tab.answer = answer
        result = await call(stack, identity, "evals.start_run", request)
    [asked] = tab.approvals
    assert asked["tool"] == "evals.start_run"
    assert asked["details"]["estimated_tokens"] == 20000 * len(scenarios)
    assert f"up to {20000 * len(scenarios)} tokens" in asked["summary"]
    runs = await stack.app.store.list_runs(ADA)
    if answer == "approve":
        assert result.ok, result
        assert [r["run_id"] for r in runs] == [result.output["run_id"]]
    else:
        assert result.error is not None
        assert result.error.code == "approval_denied"
        assert runs == []
