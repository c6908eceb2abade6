"""The pipeline's pure checks: each takes what it needs and raises a `ToolFailure` when the
call may not go on."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.core.approval_policy import Need
from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.registry import Tool
from gateway.core.results import ErrorCode, ToolStatus
from gateway.core.store.tasks import TaskRecord
from gateway.core.tasks.service import TaskStatus

from .record import TaskUsage

MAX_INPUT_BYTES = 256 * 1024


def printable_name(tool_name: str) -> str:
    """The tool name as it can be stored and answered."""
    if tool_name.isascii() and tool_name.isprintable():
        return tool_name
    # No registered name is non-ASCII or holds a control character, so this one is
    # unknown; a lone surrogate (not UTF-8) or a NUL (not PostgreSQL text) in it could
    # be neither stored as evidence nor answered, so those are kept escaped.
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in tool_name)


def known(tool: Tool | None, tool_name: str) -> Tool:
    if tool is None:
        raise ToolFailure(
            ToolStatus.DENIED,
            ErrorCode.UNKNOWN_TOOL,
            f"no tool named {tool_name[:128]!r} is available to this task",
        )
    return tool


def check_task(record: TaskRecord | None, status: TaskStatus | None) -> None:
    """The task's stored state, read again on every call: ended or expired is refused."""
    if record is None or record.revoked_at is not None:
        raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
    if status is TaskStatus.EXPIRED:
        raise ToolFailure(ToolStatus.DENIED, ErrorCode.INVALID_TOKEN, "the task has expired")


def authorize(identity: TaskIdentity, tool: Tool, approvals: bool) -> Need | None:
    """None when the grant covers the call; a `Need` when it waits for a person (only when
    `approvals`, a broker to ask through, is there)."""
    missing, other = tool.shortfall(identity)
    policy = identity.approvals
    need = None
    if approvals and (policy.required or policy.grantable):
        need = tool.approval(identity)
    if need is None and (missing or other):
        raise ToolFailure(
            ToolStatus.DENIED, ErrorCode.FORBIDDEN, f"this task may not call {tool.name!r}"
        )
    return need


def admit_evidence(wait: float, tool: Tool) -> None:
    """Turn the call away before it runs when its record could not be committed before
    its deadline: the evidence writer is `wait` seconds behind (a database locked or slow).
    Uncharged, and retryable once the queue has drained."""
    if wait < tool.timeout_s:
        return
    raise ToolFailure(
        ToolStatus.UNAVAILABLE,
        ErrorCode.OVERLOADED,
        f"the evidence store is behind: a record would wait about {wait:.1f} s to be "
        f"stored, past this call's deadline of {tool.timeout_s:g} s; nothing was done",
        retryable=True,
        details={"retry_after_s": max(1, math.ceil(wait))},
    )


def charge_budget(identity: TaskIdentity, tool: Tool, usage: TaskUsage) -> None:
    """Count the call against the task's budget, or refuse it when the budget is spent."""
    budget = identity.budget
    if budget.max_calls is not None and usage.calls >= budget.max_calls:
        raise ToolFailure(
            ToolStatus.DENIED,
            ErrorCode.BUDGET_EXCEEDED,
            f"the task's budget of {budget.max_calls} calls is spent",
        )
    if (
        tool.side_effects
        and budget.max_side_effects is not None
        and usage.side_effects >= budget.max_side_effects
    ):
        raise ToolFailure(
            ToolStatus.DENIED,
            ErrorCode.BUDGET_EXCEEDED,
            f"the task's budget of {budget.max_side_effects} side effects is spent",
        )
    usage.calls += 1


def validate(tool: Tool, raw_input: Any) -> BaseModel:
    """The input as the tool's model, when it is a JSON object of at most MAX_INPUT_BYTES."""
    if raw_input is None:
        raw_input = {}
    if not isinstance(raw_input, Mapping):
        raise ToolFailure(
            ToolStatus.FAILED, ErrorCode.INVALID_INPUT, "tool input must be a JSON object"
        )
    try:
        size = len(json.dumps(raw_input, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolFailure(
            ToolStatus.FAILED, ErrorCode.INVALID_INPUT, "tool input is not plain JSON"
        ) from exc
    if size > MAX_INPUT_BYTES:
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            f"tool input is {size} bytes; at most {MAX_INPUT_BYTES}",
        )
    try:
        return tool.input_model.model_validate(raw_input)
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            f"input does not match {tool.name}'s schema",
            details={"errors": errors},
        ) from None


def bound_output(value: Any, limit: int) -> tuple[Any, bool]:
    """The output if its JSON fits in `limit` bytes; else a flagged, cut rendering."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError) as exc:
        raise ToolFailure(
            ToolStatus.FAILED, ErrorCode.HANDLER_ERROR, "the tool returned a value that is not JSON"
        ) from exc
    encoded = text.encode()
    if len(encoded) <= limit:
        return value, False
    if isinstance(value, str):
        return value.encode()[:limit].decode(errors="ignore"), True
    return {
        "truncated_json": encoded[:limit].decode(errors="ignore"),
        "original_bytes": len(encoded),
    }, True
