"""The example app's backend: organization scoping, roles, and the run state machine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from examples.synthetic_app import AppConfig, SyntheticApp
from examples.synthetic_app.errors import Conflict, Forbidden, NotFound
from examples.synthetic_app.models import DraftFields, RunBudget, RunRequest
from examples.synthetic_app.store import Who, who

ADA = who("org_acme", "ada")  # admin of Acme
MAX = who("org_acme", "max")  # member of Acme
GUS = who("org_globex", "gus")  # admin of Globex


async def _acme(app: SyntheticApp) -> tuple[str, str]:
    agent = (await app.store.list_agents(ADA))[0]
    suite = (await app.store.list_suites(ADA))[0]
    return agent["id"], suite["id"]


async def _until_terminal(app: SyntheticApp, w: Who, run_id: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            run = await app.store.get_run(w, run_id)
            if run["terminal"]:
                return run
            await app.engine.wait_changed(0.5)


def test_a_user_outside_the_organization_is_refused() -> None:
    with pytest.raises(Forbidden):
        who("org_acme", "gus")
    with pytest.raises(Forbidden):
        who("org_acme", "nobody")


async def test_each_organization_sees_only_its_own_records(dashboard: SyntheticApp) -> None:
    acme = {a["name"] for a in await dashboard.store.list_agents(ADA)}
    globex = {a["name"] for a in await dashboard.store.list_agents(GUS)}
    assert acme == {"Support triage"}
    assert globex == {"Billing helper"}
    assert {s["name"] for s in await dashboard.store.list_suites(GUS)} == {"Invoice questions"}


async def test_another_organization_cannot_read_write_run_or_open(dashboard: SyntheticApp) -> None:
    agent_id, suite_id = await _acme(dashboard)
    run = await dashboard.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    await _until_terminal(dashboard, ADA, run["run_id"])

    with pytest.raises(NotFound):
        await dashboard.store.get_agent(GUS, agent_id)
    with pytest.raises(NotFound):
        await dashboard.store.write_draft(GUS, agent_id, DraftFields(instructions="mine now"))
    with pytest.raises(NotFound):
        await dashboard.store.save_draft(GUS, agent_id)
    with pytest.raises(NotFound):
        await dashboard.store.get_suite(GUS, suite_id)
    # Globex's own agent on Acme's suite: the suite does not exist for Globex.
    globex_agent = (await dashboard.store.list_agents(GUS))[0]["id"]
    with pytest.raises(NotFound):
        await dashboard.start_run(GUS, RunRequest(agent_id=globex_agent, suite_id=suite_id))
    with pytest.raises(NotFound):
        await dashboard.store.get_run(GUS, run["run_id"])
    with pytest.raises(NotFound):
        await dashboard.store.get_report(GUS, run["run_id"])
    assert await dashboard.store.list_runs(GUS) == []
    # Acme's agent is untouched by any of it.
    assert (await dashboard.store.get_agent(ADA, agent_id))["draft"] is None


async def test_scenarios_of_another_suite_are_unknown(dashboard: SyntheticApp) -> None:
    agent_id, suite_id = await _acme(dashboard)
    globex_suite = await dashboard.store.get_suite(
        GUS, (await dashboard.store.list_suites(GUS))[0]["id"]
    )
    foreign = globex_suite["scenarios"][0]["id"]
    with pytest.raises(NotFound):
        await dashboard.start_run(
            ADA, RunRequest(agent_id=agent_id, suite_id=suite_id, scenario_ids=[foreign])
        )
    assert await dashboard.store.list_runs(ADA) == []


async def test_a_member_drafts_but_only_an_admin_saves(dashboard: SyntheticApp) -> None:
    agent_id, _ = await _acme(dashboard)
    await dashboard.store.write_draft(
        MAX, agent_id, DraftFields(instructions="Greet and refund.", tools=["refund"])
    )
    with pytest.raises(Forbidden):
        await dashboard.store.save_draft(MAX, agent_id)
    agent = await dashboard.store.get_agent(ADA, agent_id)
    assert agent["draft"]["instructions"] == "Greet and refund."
    assert [v["number"] for v in agent["versions"]] == [1]

    saved = await dashboard.store.save_draft(ADA, agent_id)
    agent = await dashboard.store.get_agent(ADA, agent_id)
    assert saved["version"] == 2
    assert agent["current_version"]["id"] == saved["version_id"]
    assert agent["current_version"]["instructions"] == "Greet and refund."
    assert agent["current_version"]["tools"] == ["refund"]
    assert agent["draft"] is None
    with pytest.raises(Conflict):
        await dashboard.store.save_draft(ADA, agent_id)


async def test_a_new_agent_is_a_draft_until_saved(dashboard: SyntheticApp) -> None:
    _, suite_id = await _acme(dashboard)
    written = await dashboard.store.write_draft(
        MAX, None, DraftFields(name="Returns bot", model="sim-large")
    )
    agent = await dashboard.store.get_agent(MAX, written["agent_id"])
    assert agent["current_version"] is None
    assert agent["draft"]["model"] == "sim-large"
    with pytest.raises(Conflict):
        await dashboard.start_run(MAX, RunRequest(agent_id=agent["id"], suite_id=suite_id))


async def test_a_run_is_queued_then_reaches_an_explicit_terminal_state(
    dashboard: SyntheticApp,
) -> None:
    agent_id, suite_id = await _acme(dashboard)
    run = await dashboard.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    assert run["state"] == "queued"
    assert not run["terminal"]
    assert {s["state"] for s in run["scenarios"]} == {"pending"}

    done = await _until_terminal(dashboard, ADA, run["run_id"])
    verdicts = {s["name"]: (s["state"], s["reason"]) for s in done["scenarios"]}
    assert done["state"] == "completed"
    assert verdicts == {
        "Greets the customer": ("passed", "correct"),
        "Cites the refund policy": ("failed", "incorrect_answer"),
        "Escalates an angry customer": ("failed", "incorrect_answer"),
        # Missing provider credentials are a setup error, not a wrong answer.
        "Reads a photo of the parcel": ("provider_error", "provider_setup"),
    }
    assert done["counts"]["provider_error"] == 1
    assert "provider setup error" in done["scenarios"][3]["detail"]
    report = await dashboard.store.get_report(ADA, run["run_id"])
    assert report["summary"]["state"] == "completed"
    assert report["summary"]["counts"]["passed"] == 1


async def test_a_run_with_only_provider_errors_fails(dashboard: SyntheticApp) -> None:
    agent_id, suite_id = await _acme(dashboard)
    await dashboard.store.write_draft(ADA, agent_id, DraftFields(model="vision-large"))
    await dashboard.store.save_draft(ADA, agent_id)
    run = await dashboard.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    done = await _until_terminal(dashboard, ADA, run["run_id"])
    assert done["state"] == "failed"
    assert {s["state"] for s in done["scenarios"]} == {"provider_error"}
    assert "provider setup error" in (done["error"] or "")


async def test_scope_and_budget_bound_a_run(dashboard: SyntheticApp) -> None:
    agent_id, suite_id = await _acme(dashboard)
    suite = await dashboard.store.get_suite(ADA, suite_id)
    first = suite["scenarios"][0]["id"]
    run = await dashboard.start_run(
        ADA,
        RunRequest(
            agent_id=agent_id,
            suite_id=suite_id,
            scenario_ids=[first],
            budget=RunBudget(max_tokens=100),
        ),
    )
    done = await _until_terminal(dashboard, ADA, run["run_id"])
    assert [s["scenario_id"] for s in done["scenarios"]] == [first]
    assert done["scenarios"][0]["state"] == "failed"
    assert done["scenarios"][0]["reason"] == "budget_exceeded"
    assert done["budget"] == {"max_tokens": 100}


async def test_a_run_interrupted_by_a_restart_ends_failed(tmp_path: Path) -> None:
    config = AppConfig("dashboard", tmp_path / "d.db", "secret-0123456789abcdef", step_s=0.01)
    app = SyntheticApp(config)
    await app.start()
    agent_id, suite_id = await _acme(app)
    # The row a process leaves when it dies mid-run: `running`, with no engine driving it.
    run = await app.store.create_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    await app.store.set_run_state(run["run_id"], "running")
    await app.stop()

    again = SyntheticApp(config)
    await again.start()
    try:
        after = await again.store.get_run(ADA, run["run_id"])
        assert after["state"] == "failed"
        assert after["terminal"]
        assert "interrupted" in (after["error"] or "")
        assert (await again.store.get_report(ADA, run["run_id"]))["summary"]["state"] == "failed"
    finally:
        await again.stop()
