"""The pytest plugin as an app team uses it: generated suites run by pytest itself
(`pytester`, in a subprocess each, with the plugin loaded from its entry point)."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.serving import free_port
from gateway.testing.control import ControlPlane
from gateway.testing.loop_thread import LoopThread
from gateway.testing.served import ServedGateway, start_gateway

pytestmark = pytest.mark.browser

# The app's side of the gateway under test: one view the host page may be sent to.
CONFTEST = """
import pytest
from pydantic import BaseModel


class RunsParams(BaseModel):
    status: str = "all"


@pytest.fixture(scope="session")
def gateway_setup():
    def setup(gw):
        from gateway.tabs import Views
        views = Views()
        views.register("runs", RunsParams, "Runs")
        gw.services.provide(Views, views)
    return setup
"""

EVERY_FIXTURE = """
import pytest
from gateway.testing.script import Step, run_script


@pytest.mark.gateway_task(actor="ana", org="org_x", scopes=["ui"])
def test_the_assistant_shows_a_run(dashboard_page, mcp_agent, bridge_client, evidence,
                                   gateway, gateway_task):
    shown = mcp_agent.call("ui.show_run_progress", {"run_id": "run_7"})
    assert shown["status"] == "succeeded", shown
    dashboard_page.wait_for_action("show_run_progress")
    assert "run_7" in dashboard_page.page.locator("#gateway-log").inner_text()
    assert "ui_show_run_progress" in mcp_agent.list_tools()

    opened = bridge_client.call("ui.open_view", {"view": "runs", "params": {"status": "done"}})
    assert opened["status"] == "succeeded", opened
    assert dashboard_page.page.locator("#gateway-view").inner_text() == "runs"

    report = run_script(dashboard_page.webmcp(), [
        Step("ui.read_view", expect={"view": "runs"}),
        Step("ui.open_view", {"view": "nowhere"}, status="failed", error_code="invalid_input"),
    ])
    report.assert_ok()

    evidence.assert_called("ui.show_run_progress", door="mcp", output={"shown": "run_7"})
    evidence.assert_called("ui_open_view", door="bridge")
    evidence.assert_called("ui.open_view", status="failed", door="webmcp")
    assert gateway_task().actor_id == "ana"
    other = gateway_task(actor="bo")
    assert other.task_id != gateway_task().task_id
    with pytest.raises(AssertionError, match="expected a call of agents.save_draft"):
        evidence.assert_called("agents.save_draft")
"""

FAILING = """
import pytest
from gateway.testing.script import Step, run_script


def test_the_flow_breaks(gateway, gateway_task, dashboard_page):
    task = gateway_task(scopes=["browser"], origins=[gateway.host_origin])
    print("TASK", task.task_id, gateway_task().task_id)
    from gateway.testing.agents import McpAgent
    agent = McpAgent(gateway.loop, gateway.base_url, task)
    try:
        report = run_script(agent, [
            Step("browser.navigate", {"url": gateway.host_origin + "/"}),
            Step("browser.snapshot", expect=lambda out: "Wrong heading" in str(out)),
        ])
    finally:
        agent.close()
    assert report.ok, str(report)
"""


# A failing test whose dashboard page connected: its tokens are written down for the check.
FAILING_ON_THE_DASHBOARD = """
import json


def test_fails_on_the_dashboard(dashboard_page, gateway_task):
    dashboard_page.wait_connected()
    with open("tokens.json", "w") as out:
        json.dump(gateway_task().tokens, out)
    assert False, "the flow broke"
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *args, timeout=300)


def test_a_suite_using_every_fixture_passes(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_app=EVERY_FIXTURE)
    result = run(pytester)
    result.assert_outcomes(passed=1)


def test_a_failing_test_leaves_its_evidence_and_task_browser_trace(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_app=FAILING)
    result = run(pytester, "--tracing", "retain-on-failure")
    result.assert_outcomes(failed=1)
    # The report names the step that differed.
    result.stdout.fnmatch_lines(["*step 2 (browser.snapshot): the output does not hold*"])
    [folder] = (pytester.path / "test-results").iterdir()
    names = sorted(p.name for p in folder.iterdir())
    evidence_files = [n for n in names if n.startswith("gateway-evidence-")]
    assert len(evidence_files) == 2, names  # the test's own task and the one it made
    assert any(n.startswith("task-browser-trace-") and n.endswith(".zip") for n in names)
    # pytest-playwright's own trace sits beside them.
    assert "trace.zip" in names, names
    records = [
        r for n in evidence_files for r in json.loads((folder / n).read_text()) if "tool" in r
    ]
    assert {r["tool"] for r in records} >= {"browser.navigate", "browser.snapshot"}


def test_the_kept_traces_hold_no_token_of_the_tests_tasks(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_app=FAILING_ON_THE_DASHBOARD)
    result = run(pytester, "--tracing", "retain-on-failure")
    result.assert_outcomes(failed=1)
    tokens = json.loads((pytester.path / "tokens.json").read_text())
    [folder] = (pytester.path / "test-results").iterdir()
    traces = sorted(folder.glob("*.zip"))
    assert folder / "trace.zip" in traces  # pytest-playwright's trace of the dashboard page
    for trace in traces:
        with zipfile.ZipFile(trace) as archive:
            everything = b"".join(archive.read(name) for name in archive.namelist())
        assert b"context-options" in everything
        for purpose, token in tokens.items():
            assert token.encode() not in everything, (trace.name, purpose)


def test_a_passing_test_leaves_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_app=EVERY_FIXTURE)
    result = run(pytester, "--tracing", "retain-on-failure")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "test-results").exists()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[ServedGateway, int]]:
    """A gateway already running, as a team's staging one would be, that allows the host
    page's origin on a port chosen here."""
    loop = LoopThread()
    port = free_port()
    served = start_gateway(
        loop,
        tmp_path / "data",
        dashboard_origins=[f"http://127.0.0.1:{port}"],
        setup=lambda gw: None,
    )
    try:
        yield served, port
    finally:
        served.stop()
        loop.close()


def test_gateway_url_drives_a_running_gateway_and_ends_its_tasks_even_on_failure(
    pytester: pytest.Pytester, running: tuple[ServedGateway, int]
) -> None:
    served, port = running
    pytester.makepyfile(
        test_remote="""
def test_connects(dashboard_page, mcp_agent, evidence, gateway_task):
    print("TASK", gateway_task().task_id)
    assert mcp_agent.call("ui.show_run_progress", {"run_id": "r1"})["status"] == "succeeded"
    dashboard_page.wait_for_action("show_run_progress")
    evidence.assert_called("ui.show_run_progress")


def test_fails_after_connecting(dashboard_page, gateway_task):
    print("TASK", gateway_task().task_id)
    assert dashboard_page.tab()["connected"]
    assert False, "the app broke"
"""
    )
    result = run(
        pytester,
        "--gateway-url",
        served.base_url,
        "--gateway-control-key",
        served.control_key,
        "--gateway-host-port",
        str(port),
    )
    result.assert_outcomes(passed=1, failed=1)
    task_ids = re.findall(r"TASK (task_\w+)", result.stdout.str())
    assert len(task_ids) == 2
    control = ControlPlane(served.base_url, served.control_key)
    try:
        for task_id in task_ids:
            assert control.task(task_id)["status"] == "ended"
    finally:
        control.close()
