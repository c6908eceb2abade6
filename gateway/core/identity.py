"""Task identity: who acts, for which organization, in which sandbox, with what rights.

Captured on the server when the control plane creates a task and never taken from a
caller afterwards: every call is authorized against the stored identity.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.origins import OriginError, normalize_origin
from gateway.core.sandbox_spec import Provision

# An identifier that may end up in a path (an organization's artifacts, a workspace): it
# starts with a letter or digit, so `.`, `..` and `-x` are not names.
Name = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
    ),
]
Scope = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:*-]+$")
]
_BOUND_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# An entry of a task's `allowed_tools`: an exact tool name, or a prefix ending in `.*`.
ToolPattern = Annotated[
    str, StringConstraints(pattern=r"^([A-Za-z0-9_.-]{1,128}|[A-Za-z0-9_.-]{0,126}\.\*)$")
]


class Actor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Name
    role: Name


def _origins(values: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return tuple(dict.fromkeys(normalize_origin(v) for v in values))
    except OriginError as exc:
        raise ValueError(str(exc)) from exc


class Sandbox(BaseModel):
    """A task's sandbox. With `provision`, the gateway provisions the app (gateway/sandbox)
    and chooses `app_origin` itself: a request that asks for that leaves `app_origin` out,
    and the stored identity always has it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Name
    app_origin: str = ""
    allowed_origins: tuple[str, ...] = ()
    provision: Provision | None = None

    @field_validator("app_origin")
    @classmethod
    def _app_origin(cls, value: str) -> str:
        if not value:
            return value
        try:
            return normalize_origin(value)
        except OriginError as exc:
            raise ValueError(str(exc)) from exc

    _allowed = field_validator("allowed_origins")(_origins)

    @model_validator(mode="after")
    def _has_an_app(self) -> Sandbox:
        if not self.app_origin and self.provision is None:
            raise ValueError("app_origin is required, unless the sandbox is to be provisioned")
        return self

    @property
    def origins(self) -> frozenset[str]:
        """Every origin the task's browser may reach: the app's own plus the allowed ones."""
        return frozenset((self.app_origin, *self.allowed_origins))


class Budget(BaseModel):
    """Bounds on what a task may spend; `None` is unbounded."""

    model_config = ConfigDict(frozen=True, extra="allow")

    max_calls: int | None = Field(default=None, ge=0)
    max_side_effects: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _extra_bounds(self) -> Budget:
        # A host may add bounds of its own (`max_tokens`...), but each is a count: arbitrary
        # JSON here would be stored in the identity unbounded (a deeply nested value once
        # made task creation fail with a 500 at serialization).
        extra = self.model_extra or {}
        if len(extra) > 32:
            raise ValueError("at most 32 budget bounds")
        for key, value in extra.items():
            if not _BOUND_KEY.match(key):
                raise ValueError(f"budget key {key[:64]!r} is not a name")
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"budget bound {key!r} must be a non-negative integer")
        return self


class TaskIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    actor: Actor
    org_id: Name
    sandbox: Sandbox
    scopes: frozenset[Scope]
    allowed_tools: tuple[ToolPattern, ...] | None = None
    budget: Budget = Budget()
    approvals: ApprovalPolicy = ApprovalPolicy()
    # The task browser records a video of the task's pages (the console shows it).
    record_video: bool = False
    created_at: datetime
    expires_at: datetime

    def may_use_tool(self, name: str) -> bool:
        """The task's `allowed_tools` narrowing (exact names or `prefix.*`); None allows all."""
        if self.allowed_tools is None:
            return True
        for pattern in self.allowed_tools:
            if pattern.endswith(".*"):
                if name.startswith(pattern[:-1]):
                    return True
            elif pattern == name:
                return True
        return False

    def expired(self, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) >= self.expires_at

    def owner(self) -> dict[str, Any]:
        return {"org_id": self.org_id, "actor_id": self.actor.id, "task_id": self.task_id}
