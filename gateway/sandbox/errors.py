"""The sandbox's failures in the gateway's error tree.

Provisioning runs inside `POST /v1/tasks`, so these are HTTP answers there: 422 for a
request the gateway will never satisfy as written, 503 (retryable) for one that may work
later. During a task, a browser call whose sandbox is down ends
`unavailable`/`sandbox_unavailable`, retryable (`sandbox_unavailable`).
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.results import ErrorCode, ToolStatus


class SandboxError(GatewayError):
    """Provisioning failed; nothing of the sandbox is left running."""

    http_status = 503
    tool_status = ToolStatus.UNAVAILABLE
    code = ErrorCode.SANDBOX_UNAVAILABLE
    retryable = True


class SandboxRefused(SandboxError):
    """The spec names what the gateway does not offer (provider, repository, variable,
    limit): asking again will not help."""

    http_status = 422
    tool_status = ToolStatus.FAILED
    code = ErrorCode.SANDBOX_REFUSED
    retryable = False

    def __init__(self, message: str, *, field: str, **details: Any) -> None:
        super().__init__(message, details={"field": field, **details})


class UnknownCommit(SandboxError):
    http_status = 422
    tool_status = ToolStatus.FAILED
    code = ErrorCode.SANDBOX_UNKNOWN_COMMIT
    retryable = False


class Unhealthy(SandboxError):
    """The app was started and did not become healthy in time, or exited first."""

    code = ErrorCode.SANDBOX_UNHEALTHY


def sandbox_unavailable(message: str, *, retryable: bool = True, **details: Any) -> ToolFailure:
    """A call that needed the task's app while it is down: being restarted (retryable), or
    down for good after its one restart, or gone with its sandbox (not retryable)."""
    return ToolFailure(
        ToolStatus.UNAVAILABLE,
        ErrorCode.SANDBOX_UNAVAILABLE,
        message,
        retryable=retryable,
        details=details or None,
    )
