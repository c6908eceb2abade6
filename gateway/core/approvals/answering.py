"""Whether an answer may settle a pending request, and as whom it is given.

An answer is refused when the request has expired, came through a channel the task's
policy does not use, or goes beyond what its channel may answer (`policy.may_answer`: a
control need is the control plane's, a form at the agent's client confirms one call and
grants nothing, and neither the tab nor a form widens the task's grant); the tab's answer
must also carry the request's one-time nonce, and is never taken for a call made through
the tab's own WebMCP door. From the tab or the agent's client, the approver is the task's
own user, whatever the answer says.
"""

from __future__ import annotations

import hmac

from gateway.core.approvals.request import (
    ApprovalConflict,
    ApprovalRefused,
    ApprovalRequest,
    Decision,
)
from gateway.core.identity import TaskIdentity


def checked_answer(
    identity: TaskIdentity,
    request: ApprovalRequest,
    decision: Decision,
    *,
    nonce: str | None,
    now: float,
) -> Decision:
    """`decision` as it settles `request` (its approver the task's user, but from the
    control plane); ApprovalConflict or ApprovalRefused when it may not."""
    if now >= request.expires_at:
        raise ApprovalConflict("the approval has expired")
    if decision.channel not in request.channels:
        raise ApprovalRefused(f"this task's approvals are not answered through {decision.channel}")
    if not request.may_answer(decision.channel, decision.scope):
        if request.by == "control":
            raise ApprovalRefused("this approval is for the control plane to give")
        if decision.channel == "elicitation":
            raise ApprovalRefused(
                "a form at the agent's client may confirm one call inside the grant, nothing more"
            )
        raise ApprovalRefused(
            f"an answer through {decision.channel} may not widen the task's grant"
        )
    if decision.channel == "control":
        return decision
    if decision.channel == "tab":
        if not request.answerable_in_tab:
            raise ApprovalRefused("this approval is not answered in this tab")
        if nonce is None or not hmac.compare_digest(nonce, request.nonce):
            raise ApprovalRefused("the answer does not carry this request's nonce")
    return Decision(
        decision.decision,
        decision.scope,
        identity.actor.id,
        identity.actor.role,
        decision.channel,
        decision.message,
    )
