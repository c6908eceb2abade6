"""The terminal outcome of one UI action sent to a tab.

Exactly one per request: `succeeded` with the tab's result, or `timeout`,
`unavailable`/`tab_unavailable` (retryable), `unavailable`/`overloaded` (retryable, nothing
was sent), `failed`/`stale_target`, `failed`/`cancelled`, or `failed` with the page's own
error. A tool handler turns a non-success into its own
terminal result with `outcome.unwrap()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolError, ToolStatus


@dataclass(frozen=True)
class TabOutcome:
    request_id: str
    status: ToolStatus
    result: dict[str, Any] | None = None
    error: ToolError | None = None
    # Seconds the action waited for its turn at the tab before it was sent (0: none).
    waited_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.SUCCEEDED

    def unwrap(self) -> dict[str, Any]:
        """The tab's result, or raise the outcome as the calling tool's own failure."""
        if self.ok:
            return self.result or {}
        assert self.error is not None
        raise ToolFailure(
            self.status,
            self.error.code,
            self.error.message,
            retryable=self.error.retryable,
            details={"request_id": self.request_id, **(self.error.details or {})},
        )

    def public(self) -> dict[str, Any]:
        body: dict[str, Any] = {"request_id": self.request_id, "status": self.status.value}
        if self.result is not None:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error.model_dump(exclude_none=True)
        return body


def succeeded(request_id: str, result: dict[str, Any]) -> TabOutcome:
    return TabOutcome(request_id, ToolStatus.SUCCEEDED, result=result)


def failure(
    request_id: str,
    status: ToolStatus,
    code: str,
    message: str,
    *,
    retryable: bool = False,
    details: dict[str, Any] | None = None,
) -> TabOutcome:
    return TabOutcome(
        request_id,
        status,
        error=ToolError(code=code, message=message, retryable=retryable, details=details),
    )


def tab_unavailable(request_id: str, message: str, *, retryable: bool = True) -> TabOutcome:
    return failure(
        request_id, ToolStatus.UNAVAILABLE, ErrorCode.TAB_UNAVAILABLE, message, retryable=retryable
    )
