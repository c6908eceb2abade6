"""An approval request as a person and the gateway see it, the decision that settles it,
and the two refusals an answer can meet."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.core.approval_policy import Approver, Channel, Need, Reason, may_answer
from gateway.core.errors import GatewayError
from gateway.core.results import Door, ErrorCode, ToolStatus

Status = Literal["pending", "approved", "denied", "expired", "cancelled"]


class ApprovalConflict(GatewayError):
    """The request is already decided, expired, or not answerable this way."""

    code = ErrorCode.CONFLICT
    http_status = 409


class ApprovalRefused(GatewayError):
    """This channel or person may not answer this request."""

    code = ErrorCode.FORBIDDEN
    http_status = 403
    tool_status = ToolStatus.DENIED


@dataclass(frozen=True)
class Decision:
    decision: Literal["approve", "deny"]
    scope: Literal["call", "task"] = "call"
    approver_id: str = ""
    approver_role: str = ""
    channel: Channel = "control"
    message: str | None = None

    def public(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "scope": self.scope,
            "approver": {"id": self.approver_id, "role": self.approver_role},
            "channel": self.channel,
            "message": self.message,
        }


@dataclass
class ApprovalRequest:
    id: str
    task_id: str
    org_id: str
    call_id: str
    tool: str
    door: str
    input_sha256: str
    summary: str
    details: dict[str, Any]
    by: Approver
    channels: tuple[Channel, ...]
    created_at: float
    expires_at: float
    status: Status = "pending"
    decision: Decision | None = None
    # One-time, for the tab: an answer must carry it, and it is spent with the answer.
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    reason: Reason = "beyond the grant"

    @property
    def need(self) -> Need:
        return Need(self.by, self.reason)

    def may_answer(self, channel: Channel, scope: str = "call") -> bool:
        """Whether this task's policy and the need let `channel` settle the request with
        an answer of `scope`."""
        return channel in self.channels and may_answer(channel, self.need, scope)

    @property
    def answerable_in_tab(self) -> bool:
        # A call made through the tab's own WebMCP door is not approved in that same tab:
        # an agent driving the page can press its buttons.
        return self.may_answer("tab") and self.door != Door.WEBMCP

    def shown(self) -> dict[str, Any]:
        """What the tab shows: text only, and the nonce only where the tab may answer."""
        answerable = self.answerable_in_tab
        view: dict[str, Any] = {
            "id": self.id,
            "tool": self.tool,
            "summary": self.summary,
            "details": self.details,
            "by": self.by,
            "reason": self.reason,
            "answerable": answerable,
            "status": self.status,
            "expires_at": self.expires_at,
        }
        if answerable and self.status == "pending":
            view["nonce"] = self.nonce
        return view

    def public(self) -> dict[str, Any]:
        return {
            "approval_id": self.id,
            "task_id": self.task_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "door": self.door,
            "input_sha256": self.input_sha256,
            "summary": self.summary,
            "details": self.details,
            "by": self.by,
            "channels": list(self.channels),
            "status": self.status,
            "reason": self.reason,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decision": self.decision.public() if self.decision else None,
        }
