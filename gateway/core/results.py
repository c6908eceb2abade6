"""The terminal result of a tool call, identical whichever door the call came in by.

CONTRACT section 4: every call ends in exactly one `ToolResult` whose status is one of
five values; a non-success carries `error {code, message, retryable}`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ToolStatus(StrEnum):
    SUCCEEDED = "succeeded"
    DENIED = "denied"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    FAILED = "failed"


class ErrorCode(StrEnum):
    UNKNOWN_TOOL = "unknown_tool"
    FORBIDDEN = "forbidden"
    INVALID_INPUT = "invalid_input"
    INVALID_TOKEN = "invalid_token"  # noqa: S105 - an error code, not a secret
    REVOKED = "revoked"
    STALE_TARGET = "stale_target"
    TAB_UNAVAILABLE = "tab_unavailable"
    BROWSER_UNAVAILABLE = "browser_unavailable"
    ORIGIN_BLOCKED = "origin_blocked"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    HANDLER_ERROR = "handler_error"
    TIMEOUT = "timeout"
    NOT_FOUND = "not_found"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    STORAGE_FAILED = "storage_failed"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    CONFLICT = "conflict"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_TIMEOUT = "approval_timeout"
    QUOTA_EXCEEDED = "quota_exceeded"
    OVERLOADED = "overloaded"
    # A task's provisioned sandbox: its app is down (mid-task), or could not be started.
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    # Provisioning refused before anything ran: a provider, repository, environment
    # variable or limit the gateway does not offer; a commit the repository does not have.
    SANDBOX_REFUSED = "sandbox_refused"
    SANDBOX_UNKNOWN_COMMIT = "sandbox_unknown_commit"
    # The app started but did not answer its health check in time (or exited first).
    SANDBOX_UNHEALTHY = "sandbox_unhealthy"
    # A side effect that may or may not have happened: its node went away before recording
    # the outcome. Never run again by the gateway on its own.
    IN_DOUBT = "in_doubt"
    # A tool asked for something it cannot do on this target (a fill on a file input);
    # the message names the tool that can.
    UNSUPPORTED = "unsupported"


class Door(StrEnum):
    """How a call reached the pipeline; recorded in evidence and nowhere else."""

    MCP = "mcp"
    WEBMCP = "webmcp"
    TAB = "tab"
    BRIDGE = "bridge"
    DELEGATION = "delegation"
    INTERNAL = "internal"


class ToolError(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] | None = None


class ToolResult(BaseModel):
    """One terminal result. `output` is bounded; `truncated` says when it was cut."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    status: ToolStatus
    output: Any = None
    error: ToolError | None = None
    truncated: bool = False
    replayed: bool = Field(default=False, description="an idempotent replay of a recorded result")
    # The input as the call's evidence keeps it (secrets masked, bulk digested), for other
    # records of the same call (a bridge transcript); never part of the wire form.
    recorded_input: Any = Field(default=None, exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.SUCCEEDED

    def public(self) -> dict[str, Any]:
        """The wire form every door returns (no internal fields dropped or added)."""
        return self.model_dump(mode="json", exclude_none=True)
