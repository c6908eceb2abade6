"""The rules that end a pending UI action request (CONTRACT section 5), as plain functions.

A reply is accepted only from the connection the request was sent to, carrying that
connection's task and tab ids and the request's revision, before the request expires; an
accepted reply settles the request with the page's result or its error. A request the tab
does not answer in time times out. A revision that moves past a request's keeps it where
its target still holds in the new view, and fails it as `stale_target` where it does not.
Nothing here keeps state or reads a clock: `now` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.results import ErrorCode, ToolStatus
from gateway.tabs import frames
from gateway.tabs.actions import UIAction, target_holds
from gateway.tabs.outcome import TabOutcome, failure, succeeded

# Codes a page may give in a failed reply that keep their meaning; any other code becomes
# `handler_error` (the page's own code is kept in the details).
_PAGE_CODES = {
    ErrorCode.STALE_TARGET.value,
    ErrorCode.CANCELLED.value,
    ErrorCode.INVALID_INPUT.value,
}


@dataclass
class Pending:
    """A request sent to a tab connection, aimed at one revision, awaiting its reply."""

    id: str
    action: UIAction
    conn: str
    revision: int
    expires_at: float


def refusal(
    pending: Pending | None, reply: frames.Reply, *, conn: str, task_id: str, tab_id: str
) -> tuple[str, str] | None:
    """Why the connection `conn` (of tab `tab_id`) may not answer the request, as a reason
    and a message; None when it may."""
    if pending is None:
        return "unknown_request", "no pending request has this id on this channel"
    if pending.conn != conn:
        return "wrong_connection", "the request was sent to another connection"
    if reply.task_id != task_id:
        return "wrong_task", "the reply names another task"
    if reply.tab_id != tab_id:
        return "wrong_tab", "the reply names another tab"
    if reply.revision != pending.revision:
        return "stale_revision", f"the request is aimed at revision {pending.revision}"
    return None


def expired(pending: Pending, now: float) -> bool:
    return now >= pending.expires_at


def answered(pending: Pending, reply: frames.Reply) -> TabOutcome:
    """The outcome an accepted reply gives its request."""
    if reply.ok:
        return succeeded(pending.id, reply.result or {})
    error = reply.error or frames.ReplyError(code="handler_error", message="")
    code = error.code if error.code in _PAGE_CODES else ErrorCode.HANDLER_ERROR.value
    message = error.message[:500] or "the page could not apply the action"
    details: dict[str, Any] | None = None if code == error.code else {"tab_code": error.code[:64]}
    return failure(pending.id, ToolStatus.FAILED, code, message, details=details)


def timed_out(pending: Pending) -> TabOutcome:
    return failure(
        pending.id,
        ToolStatus.TIMEOUT,
        ErrorCode.TIMEOUT,
        "the tab did not answer in time",
        retryable=True,
    )


def stale(pending: Pending, revision: int, view: dict[str, Any]) -> TabOutcome | None:
    """The tab reached `revision` showing `view`: the request's `stale_target` outcome, or
    None where its target still holds (it is then re-aimed at the new revision)."""
    if target_holds(pending.action, view):
        return None
    return failure(
        pending.id,
        ToolStatus.FAILED,
        ErrorCode.STALE_TARGET,
        "the page moved away from the action's target",
        details={"revision": revision},
    )
