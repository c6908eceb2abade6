"""The record of one call on its way to its terminal result, and what a task has spent."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gateway.core.identity import TaskIdentity
from gateway.core.registry import ToolContext
from gateway.core.results import Door, ErrorCode, ToolError, ToolResult, ToolStatus


@dataclass
class Call:
    """The state of one call on its way to its terminal result."""

    identity: TaskIdentity
    tool_name: str
    door: Door
    call_id: str
    idempotency_key: str | None
    input: Any
    started: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    status: ToolStatus = ToolStatus.SUCCEEDED
    output: Any = None
    error: ToolError | None = None
    truncated: bool = False
    replayed: bool = False
    charged: bool = False  # counted against the task's call budget
    side_effect: bool = False  # counted against its side-effect budget
    context: ToolContext | None = None
    idempotency_row: tuple[Any, dict[str, Any]] | None = None
    shed: bool = False  # turned away before it ran: the evidence writer is too far behind

    def result(self, recorded_input: Any = None) -> ToolResult:
        return ToolResult(
            call_id=self.call_id,
            tool=self.tool_name,
            status=self.status,
            output=self.output,
            error=self.error,
            truncated=self.truncated,
            replayed=self.replayed,
            recorded_input=recorded_input,
        )


@dataclass
class TaskUsage:
    calls: int = 0
    side_effects: int = 0


def lost_owner(call: Call, epoch: int) -> Call:
    """A side effect whose node lost the task while it ran (another node owns it now, or
    the task ended): it is recorded as in doubt, not as its result, under no idempotency
    key (a retry under the key is told `in_doubt`, never run again by itself). `epoch`: the
    owner epoch it ran under."""
    call.error = ToolError(
        code=ErrorCode.IN_DOUBT,
        message="this gateway node lost the task while the call ran; whether it took "
        "effect is not known",
        details={"epoch": epoch},
    )
    call.status = ToolStatus.UNAVAILABLE
    call.output = None
    call.idempotency_row = None
    return call
