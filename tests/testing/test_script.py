"""The scripted agent and the evidence assertions, over recorded results (the doors they
run through are tried for real in test_pytest_plugin and e2e/)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.testing.evidence import Evidence
from gateway.testing.script import Step, run_script


class Recorded:
    """An agent that answers from a list of results, and keeps what it was asked."""

    door = "recorded"

    def __init__(self, *results: dict[str, Any]) -> None:
        self.results = list(results)
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        self.asked.append((tool, arguments or {}))
        return self.results.pop(0)


def ok(**output: Any) -> dict[str, Any]:
    return {"status": "succeeded", "output": output}


def test_a_script_as_expected_is_ok() -> None:
    agent = Recorded(ok(view="agents"), {"status": "denied", "error": {"code": "not_found"}})
    report = run_script(
        agent,
        [
            Step("dashboard.read_view", expect={"view": "agents"}),
            {"tool": "agents.prepare_draft", "status": "denied", "error_code": "not_found"},
        ],
    )
    report.assert_ok()
    assert str(report) == "2 of 2 steps as expected through recorded"
    assert [tool for tool, _ in agent.asked] == ["dashboard.read_view", "agents.prepare_draft"]


@pytest.mark.parametrize(
    ("result", "step", "said"),
    [
        (
            {"status": "denied", "error": {"code": "forbidden", "message": "no"}},
            Step("a.b"),
            "expected status succeeded, got denied (forbidden: no)",
        ),
        (
            {"status": "denied", "error": {"code": "forbidden"}},
            Step("a.b", status="denied", error_code="origin_blocked"),
            "expected error origin_blocked, got forbidden",
        ),
        (ok(view="runs"), Step("a.b", expect={"view": "agents"}), "got 'runs'"),
        (ok(), Step("a.b", expect={"view": "agents"}), "the output has no 'view'"),
        (ok(n=1), Step("a.b", expect=lambda out: out["n"] > 1), "does not hold the expectation"),
    ],
)
def test_the_report_names_the_first_step_that_differs(
    result: dict[str, Any], step: Step, said: str
) -> None:
    agent = Recorded(ok(), result, ok())
    report = run_script(agent, [Step("first.step"), step, Step("never.run")])
    assert not report.ok
    assert str(report).startswith("through recorded, step 2 (a.b): ")
    assert said in str(report)
    assert len(agent.asked) == 2  # it stopped there
    with pytest.raises(AssertionError, match="step 2"):
        report.assert_ok()


def test_a_step_in_plain_form_names_only_known_fields() -> None:
    with pytest.raises(ValueError, match="a step is tool, input"):
        Step.of({"tool": "a.b", "inputs": {}})


class Records:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records

    def evidence(self, _task_id: str) -> list[dict[str, Any]]:
        return self.records


def call(tool: str, status: str, door: str = "mcp", **output: Any) -> dict[str, Any]:
    return {"kind": "call", "tool": tool, "status": status, "door": door, "output": output}


def test_assert_called_matches_either_name_and_says_what_was_recorded() -> None:
    records = [
        call("agents.save_draft", "denied"),
        call("agents.save_draft", "succeeded", "bridge", version_id="v1"),
        {"kind": "approval.decided", "data": {}},
    ]
    evidence = Evidence(Records(records), "task_1")  # type: ignore[arg-type]
    found = evidence.assert_called("agents_save_draft", door="bridge", output={"version_id": "v1"})
    assert found["output"] == {"version_id": "v1"}
    evidence.assert_called("agents.save_draft", status="denied", times=1)
    with pytest.raises(
        AssertionError, match="its calls were: denied via mcp, succeeded via bridge"
    ):
        evidence.assert_called("agents.save_draft", door="webmcp")
    with pytest.raises(AssertionError, match="it was not called; the task's last calls: agents"):
        evidence.assert_called("evals.start_run")
    with pytest.raises(AssertionError, match=r"expected no call of agents\.save_draft, found 2"):
        evidence.assert_not_called("agents.save_draft")
    assert len(evidence.records("approval.decided")) == 1
