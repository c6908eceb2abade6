"""A task's approval policy, captured with its identity, and which calls need a person."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Approver = Literal["actor", "control"]
Channel = Literal["tab", "control", "elicitation"]
ToolId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]
ScopeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:*-]{1,128}$")]
MAX_TIMEOUT_S = 600


class Grantable(BaseModel):
    """What a person may approve beyond the task's grant: a tool, or the tools of a scope."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: ToolId | None = None
    scope: ScopeName | None = None
    by: Approver = "actor"

    @model_validator(mode="after")
    def _one(self) -> Grantable:
        if (self.tool is None) == (self.scope is None):
            raise ValueError("a grantable entry names a tool or a scope")
        return self


class ApprovalPolicy(BaseModel):
    """`POST /v1/tasks`' `approvals`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: tuple[ToolId, ...] = Field(default=(), max_length=256)
    grantable: tuple[Grantable, ...] = Field(default=(), max_length=256)
    channels: tuple[Channel, ...] = ("tab", "control")
    timeout_s: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S)

    @model_validator(mode="after")
    def _channels(self) -> ApprovalPolicy:
        if not self.channels:
            raise ValueError("approvals need at least one channel")
        if len(set(self.channels)) != len(self.channels):
            raise ValueError("a channel is named twice")
        if "control" not in self.channels and any(g.by == "control" for g in self.grantable):
            raise ValueError('an entry approved `by: "control"` needs the control channel')
        return self


@dataclass(frozen=True)
class Need:
    """A call that waits for a person: who may answer, and why it asks."""

    by: Approver
    reason: str  # "required", "beyond the grant", "the tool asks"


def _who(entries: list[Grantable]) -> Approver:
    """The control plane, if any entry reserves the decision for it; else the task's user."""
    return "control" if any(g.by == "control" for g in entries) else "actor"


def approval_need(
    policy: ApprovalPolicy,
    tool_name: str,
    missing_scopes: frozenset[str],
    other_refusal: bool,
) -> Need | None:
    """Whether a call needs a person, or None (it runs, or stays denied, as it is).

    `missing_scopes` are the tool's scopes the task lacks; `other_refusal` is any other
    reason its grant refuses the call (a role, the task's `allowed_tools`).
    """
    named = [g for g in policy.grantable if g.tool == tool_name]
    if not missing_scopes and not other_refusal:
        return Need(_who(named), "required") if tool_name in policy.required else None
    if named:
        return Need(_who(named), "beyond the grant")
    if other_refusal:
        return None  # a role or the task's own list: only a grant naming the tool covers it
    covering = [g for g in policy.grantable if g.scope in missing_scopes]
    if {g.scope for g in covering} >= missing_scopes:
        return Need(_who(covering), "beyond the grant")
    return None
