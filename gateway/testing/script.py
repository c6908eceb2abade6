"""A scripted agent: a flow as a list of steps, run through any door, without a model.

    report = run_script(mcp_agent, [
        Step("ui.open_view", {"view": "agent_builder"}),
        Step("agents.save_draft", {...}, expect={"saved": True}),
        Step("browser.navigate", {"url": "https://elsewhere.test/"}, status="denied"),
    ])
    report.assert_ok()

Each step names a tool, its input, the status it must end with (and, optionally, the error
code), and an expectation on its output: a dict every key of which the output must hold
with that value, or a predicate. The run stops at the first step that differs, and the
report names it, what was expected and what came back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.testing.agents import Agent

Expectation = Mapping[str, Any] | Callable[[Any], bool]


@dataclass(frozen=True)
class Step:
    tool: str
    input: Mapping[str, Any] = field(default_factory=dict)
    status: str = "succeeded"
    error_code: str | None = None
    expect: Expectation | None = None

    @classmethod
    def of(cls, value: Step | Mapping[str, Any]) -> Step:
        """A step from its plain form (`{"tool": ..., "input": ..., "status": ...}`)."""
        if isinstance(value, Step):
            return value
        unknown = set(value) - {"tool", "input", "status", "error_code", "expect"}
        if unknown or "tool" not in value:
            raise ValueError(f"a step is tool, input, status, error_code, expect; got {value}")
        return cls(**value)


@dataclass(frozen=True)
class StepOutcome:
    index: int
    step: Step
    result: dict[str, Any]
    difference: str | None

    def __str__(self) -> str:
        head = f"step {self.index + 1} ({self.step.tool})"
        if self.difference is None:
            return f"{head}: {self.result.get('status')}"
        return f"{head}: {self.difference}"


@dataclass
class ScriptReport:
    door: str
    outcomes: list[StepOutcome]
    steps: int

    @property
    def first_difference(self) -> StepOutcome | None:
        return next((o for o in self.outcomes if o.difference is not None), None)

    @property
    def ok(self) -> bool:
        return self.first_difference is None and len(self.outcomes) == self.steps

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        differing = self.first_difference
        if differing is None:
            return f"{len(self.outcomes)} of {self.steps} steps as expected through {self.door}"
        return f"through {self.door}, {differing}"


def run_script(agent: Agent, steps: Sequence[Step | Mapping[str, Any]]) -> ScriptReport:
    script = [Step.of(step) for step in steps]
    outcomes: list[StepOutcome] = []
    for index, step in enumerate(script):
        result = agent.call(step.tool, dict(step.input))
        outcome = StepOutcome(index, step, result, _difference(step, result))
        outcomes.append(outcome)
        if outcome.difference is not None:
            break
    return ScriptReport(agent.door, outcomes, len(script))


def _difference(step: Step, result: dict[str, Any]) -> str | None:
    status = result.get("status")
    error = result.get("error") or {}
    if status != step.status:
        said = f" ({error.get('code')}: {error.get('message')})" if error else ""
        return f"expected status {step.status}, got {status}{said}"
    if step.error_code is not None and error.get("code") != step.error_code:
        return f"expected error {step.error_code}, got {error.get('code')}"
    if step.expect is None:
        return None
    output = result.get("output")
    if callable(step.expect):
        held = step.expect(output)
        return None if held else f"the output does not hold the expectation: {_short(output)}"
    if not isinstance(output, Mapping):
        return f"expected an output with {dict(step.expect)}, got {_short(output)}"
    for key, wanted in step.expect.items():
        if key not in output:
            return f"expected output[{key!r}] == {wanted!r}, the output has no {key!r}"
        if output[key] != wanted:
            return f"expected output[{key!r}] == {wanted!r}, got {output[key]!r}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 300 else text[:300] + "…"
