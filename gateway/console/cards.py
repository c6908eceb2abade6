"""The cards the console shows of a task: an approval (what it would approve first, then
the controls of its answer) and the task's call metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.console.markup import details, e, ms, when

# Who may answer a request, by its `by`: the control plane answers any of them.
ASKED_OF = {
    "actor": "the task's own user, or the control plane",
    "control": "the control plane only",
}


def approval_card(approval: Mapping[str, Any]) -> str:
    """A pending approval with what it would approve first, then the answer's controls."""
    aid = str(approval.get("approval_id", ""))
    tool = str(approval.get("tool", ""))
    status = str(approval.get("status", ""))
    decision = approval.get("decision") or {}
    approver = decision.get("approver") or {} if isinstance(decision, Mapping) else {}
    outcome = (
        f"{status} by {approver.get('id', '')} through {decision.get('channel', '')}"
        if status != "pending" and isinstance(decision, Mapping) and decision
        else status
    )
    controls = (
        '<fieldset class="answer" disabled>'
        "<legend>Answer</legend>"
        f'<label><input type="radio" name="scope-{e(aid)}" value="call" checked> '
        "this call only</label>"
        f'<label><input type="radio" name="scope-{e(aid)}" value="task"> '
        f"{e(tool)} for the rest of the task</label>"
        '<div class="buttons">'
        f'<button type="button" class="approve" data-decision="approve">Approve {e(tool)}</button>'
        f'<button type="button" class="deny" data-decision="deny">Deny</button>'
        "</div>"
        '<p class="arming" aria-live="polite">Read what it approves; the buttons take an '
        "answer once this card has stayed in view, still, for a moment.</p>"
        "</fieldset>"
        if status == "pending"
        else ""
    )
    return (
        f'<section class="approval" data-approval-id="{e(aid)}" data-state="{e(status)}" '
        f'data-testid="approval-{e(aid)}">'
        f"<h3>{e(tool)} <span class='status s-{e(status)}' data-field='outcome'>"
        f"{e(outcome)}</span></h3>"
        f'<p class="summary">{e(approval.get("summary"))}</p>'
        "<dl>"
        f"<dt>call</dt><dd>{e(approval.get('call_id'))}</dd>"
        f"<dt>door</dt><dd>{e(approval.get('door'))}</dd>"
        f"<dt>answered by</dt><dd>{e(ASKED_OF.get(str(approval.get('by')), approval.get('by')))}"
        "</dd>"
        f"<dt>input sha256</dt><dd class='digest'>{e(approval.get('input_sha256'))}</dd>"
        f"<dt>expires</dt><dd>{e(when(approval.get('expires_at')))}</dd>"
        "</dl>"
        f"{details('details', approval.get('details'))}"
        f"{controls}</section>"
    )


def metrics_html(metrics: Mapping[str, Any], pending: int) -> str:
    cells = [
        ("calls", metrics["calls"]),
        ("refused", metrics["refused"]),
        ("shed", metrics["shed"]),
        ("pending_approvals", pending),
        ("p50", ms(metrics["p50_ms"])),
        ("p99", ms(metrics["p99_ms"])),
    ]
    labels = {"pending_approvals": "pending approvals"}
    return "".join(
        f'<div class="metric"><span class="value" data-metric="{name}">{e(value)}</span>'
        f'<span class="label">{e(labels.get(name, name))}</span></div>'
        for name, value in cells
    )
