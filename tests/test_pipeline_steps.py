"""The pipeline's pure steps, each on its own: what it lets through and what it raises."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.errors import ToolFailure
from gateway.core.identity import Budget
from gateway.core.pipeline import MAX_INPUT_BYTES, bound_output, steps
from gateway.core.pipeline.record import TaskUsage
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from tests.core_fixtures import identity


class _Note(BaseModel):
    text: str


async def _handler(_ctx: ToolContext, _args: Any) -> None:
    return None


def _tool(**kw: Any) -> Tool:
    fields: dict[str, Any] = {
        "name": "t.note",
        "title": "Note",
        "description": "a note",
        "input_model": _Note,
        "handler": _handler,
    }
    return Tool(**(fields | kw))


def _failure(exc: pytest.ExceptionInfo[ToolFailure]) -> tuple[ToolStatus, str]:
    error = exc.value.to_tool_error()
    return exc.value.tool_status, error.code


def test_printable_name_keeps_plain_names_and_escapes_the_rest() -> None:
    assert steps.printable_name("t.note") == "t.note"
    assert steps.printable_name("a\x00b") == "a\\x00b"
    assert steps.printable_name("\ud800") == "\\ud800"


def test_unknown_tool_is_denied() -> None:
    with pytest.raises(ToolFailure) as exc:
        steps.known(None, "nope")
    assert _failure(exc) == (ToolStatus.DENIED, ErrorCode.UNKNOWN_TOOL)
    tool = _tool()
    assert steps.known(tool, "t.note") is tool


def test_a_task_not_stored_has_ended() -> None:
    with pytest.raises(ToolFailure) as exc:
        steps.check_task(None, None)
    assert _failure(exc) == (ToolStatus.DENIED, ErrorCode.REVOKED)


def test_budget_counts_calls_and_refuses_past_it() -> None:
    ident = identity(budget=Budget(max_calls=1, max_side_effects=0))
    usage = TaskUsage()
    steps.charge_budget(ident, _tool(), usage)
    assert usage.calls == 1
    with pytest.raises(ToolFailure) as exc:
        steps.charge_budget(ident, _tool(), usage)
    assert _failure(exc) == (ToolStatus.DENIED, ErrorCode.BUDGET_EXCEEDED)
    with pytest.raises(ToolFailure):
        steps.charge_budget(ident, _tool(side_effects=True), TaskUsage())


def test_validate_wants_a_json_object_of_the_tool_schema() -> None:
    tool = _tool()
    assert steps.validate(tool, {"text": "hi"}) == _Note(text="hi")
    for bad in (["x"], {"text": 1}, {"text": "x" * MAX_INPUT_BYTES}, {"x": object()}):
        with pytest.raises(ToolFailure) as exc:
            steps.validate(tool, bad)
        assert _failure(exc) == (ToolStatus.FAILED, ErrorCode.INVALID_INPUT)


def test_evidence_far_behind_turns_the_call_away() -> None:
    steps.admit_evidence(0.5, _tool(timeout_s=1.0))
    with pytest.raises(ToolFailure) as exc:
        steps.admit_evidence(2.5, _tool(timeout_s=1.0))
    assert _failure(exc) == (ToolStatus.UNAVAILABLE, ErrorCode.OVERLOADED)
    assert exc.value.to_tool_error().details == {"retry_after_s": 3}


def test_authorize_denies_what_the_grant_does_not_cover() -> None:
    assert steps.authorize(identity(), _tool(), approvals=False) is None
    with pytest.raises(ToolFailure) as exc:
        steps.authorize(identity(), _tool(scopes=frozenset({"admin"})), approvals=False)
    assert _failure(exc) == (ToolStatus.DENIED, ErrorCode.FORBIDDEN)


def test_bound_output_cuts_and_flags() -> None:
    assert bound_output({"a": 1}, 100) == ({"a": 1}, False)
    assert bound_output("abcdef", 3) == ("abc", True)
    cut, truncated = bound_output({"a": "x" * 50}, 10)
    assert truncated and cut["original_bytes"] > 10
