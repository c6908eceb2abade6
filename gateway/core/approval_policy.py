"""A task's approval policy, captured with its identity; which calls need a person, and
which channel may answer which need.

A `Need` names the party that must answer it (`by`: the task's own user or the control
plane) and why it asks (`reason`). `may_answer` is the one rule of which channel may settle
which need: every door and the broker ask it, none decides it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Approver = Literal["actor", "control"]
Channel = Literal["tab", "control", "elicitation"]
# Why a call waits: the task's `required`; a `grantable` entry beyond its grant; or the
# tool's own ask inside its handler (`ctx.request_approval`).
Reason = Literal["required", "beyond the grant", "the tool asks"]
# A tool's own ask: the shim's approval panel tells it apart by this reason too.
OWN_ASK: Final = "the tool asks"
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
    reason: Reason

    @property
    def widens(self) -> bool:
        """Approving it lets the task do what its grant does not cover."""
        return self.reason == "beyond the grant"

    @property
    def own_ask(self) -> bool:
        """The tool's own ask inside its handler, not the gate in front of the tool."""
        return self.reason == OWN_ASK

    def grant_key(self, tool: str) -> str:
        """Where "approve for this task" of this need is filed, so that it answers only
        this need later. The gate in front of a tool is one need per task (the policy and
        the identity are fixed at creation): the tool's id. A tool's own ask is apart, by
        the party it names ('/' is in no tool id)."""
        return f"{tool}/ask/{self.by}" if self.own_ask else tool

    def public(self) -> dict[str, str]:
        return {"by": self.by, "reason": self.reason}


def may_answer(channel: Channel, need: Need, scope: str = "call") -> bool:
    """Whether an answer through `channel`, of `scope` (`call`, or `task`: for the rest of
    the task), may settle `need`. The one rule of who answers what (docs/approvals.md).

    The control plane answers anything. A need the policy reserves for the control plane is
    answered by nothing else. The tab is the person's own element (the broker also binds
    the answer to the request's nonce and refuses a call made through that tab's WebMCP
    door). An MCP form elicitation is answered by whatever the agent's client runs, so it
    may confirm one call inside the grant (a `required` tool, the tool's own ask), never
    widen the grant, nor grant anything for the rest of the task.
    """
    if channel == "control":
        return True
    if need.by == "control":
        return False
    if channel == "elicitation":
        return not need.widens and scope == "call"
    return True


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
