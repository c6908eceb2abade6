"""The approval step: a call whose grant does not cover it waits for a person, and a
handler that asks a person mid-call does so the same way, its deadline paused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.approval_policy import OWN_ASK, Approver, Need
from gateway.core.approvals.broker import Approvals, default_summary
from gateway.core.approvals.question import Question
from gateway.core.ports import Elicit
from gateway.core.recording import input_digest, masked
from gateway.core.registry import ProgressFn, Tool

from .deadline import Pause
from .record import Call


@dataclass
class Asking:
    """How one call reaches its caller while it runs: progress, cancel, elicitation."""

    progress: ProgressFn | None
    cancel: asyncio.Event | None
    elicit: Elicit | None
    pause: Pause = field(default_factory=Pause)


def secret_values(call: Call) -> list[str]:
    """The values of the call's secret input fields, kept out of what a person is shown
    (a handler's own summary may quote its input)."""
    fields = call.context.secrets if call.context is not None else set()
    if not isinstance(call.input, dict):
        return []
    found: list[str] = []
    # A secret field may hold others (a form's fields): every text below it is secret.
    pending = [v for k, v in call.input.items() if k in fields]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and value:
            found.append(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return found


def question(
    call: Call,
    asking: Asking,
    need: Need,
    digest: str,
    summary: str,
    details: dict[str, Any] | None = None,
) -> Question:
    """What a person is asked about this call, reaching its caller as the call does."""
    return Question(
        call.identity,
        need=need,
        call_id=call.call_id,
        tool=call.tool_name,
        door=call.door,
        input_digest=digest,
        summary=summary,
        details=details,
        cancel=asking.cancel,
        progress=asking.progress,
        elicit=asking.elicit,
        secret_values=secret_values(call),
    )


async def approve(
    approvals: Approvals, call: Call, tool: Tool, need: Need, digest: str, asking: Asking
) -> None:
    """Wait for a person, unless one already granted this need (the gate in front of
    this tool, for the party the policy names) for the whole task."""
    assert call.context is not None
    grant = await approvals.granted(call.identity.task_id, tool.name, need)
    if grant is not None:
        call.context.evidence["approval"] = {"granted_for_task": grant["approval_id"]}
        call.context.approved_by = dict(grant["by"])
        return
    # What a person reads never holds what evidence would not keep.
    shown = masked(call.input, call.context.secrets)
    summary = (
        tool.approval_summary(shown)
        if tool.approval_summary is not None
        else default_summary(tool.title, tool.name, shown)
    )
    request = await approvals.ask(question(call, asking, need, digest, summary))
    call.context.evidence["approval"] = {"approval_id": request.id}
    if request.decision is not None:
        call.context.approved_by = request.decision.public()["approver"]


def asker(
    approvals: Approvals, call: Call, asking: Asking
) -> Callable[[str, dict[str, Any] | None, Approver], Awaitable[None]]:
    """`ctx.request_approval` of this call: asks as the pipeline would, and the time a
    person takes does not count against the tool's deadline."""

    async def ask(summary: str, details: dict[str, Any] | None, by: Approver) -> None:
        identity = call.identity
        need = Need(by, OWN_ASK)
        # Approved for the task, this ask is not asked again (the gate before the tool
        # was passed on its own terms).
        grant = await approvals.granted(identity.task_id, call.tool_name, need)
        if grant is not None:
            if call.context is not None:
                granted = call.context.evidence.setdefault("asks_granted_for_task", [])
                granted.append(grant["approval_id"])
            return
        digest = input_digest(call.input)
        asking.pause.begin()
        try:
            request = await approvals.ask(question(call, asking, need, digest, summary, details))
        finally:
            asking.pause.end()
        if call.context is not None:
            call.context.evidence.setdefault("approvals", []).append(request.id)

    return ask
