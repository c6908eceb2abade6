"""The table of one channel's pending UI action requests, and the effects that end them.

Every entry is the current connection's (a connection that goes fails its own). The table
applies the rules of `gateway/tabs/reply_rules.py`: it returns the effects a reply, a
timeout, a cancellation or a moved revision brings, and drops a request as it settles.
"""

from __future__ import annotations

from typing import Any

from gateway.core.results import ErrorCode, ToolStatus
from gateway.tabs import frames, reply_rules
from gateway.tabs.actions import UIAction
from gateway.tabs.effects import Effect, Send, Settle
from gateway.tabs.outcome import TabOutcome, failure, tab_unavailable
from gateway.tabs.reply_rules import Pending


class Requests:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._pending: dict[str, Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._pending

    def ids(self) -> list[str]:
        return list(self._pending)

    def open(
        self, request_id: str, action: UIAction, conn: str, revision: int, expires_at: float
    ) -> Pending:
        pending = Pending(request_id, action, conn, revision, expires_at)
        self._pending[request_id] = pending
        return pending

    def waits_for(self, request_id: str, conn: str | None) -> bool:
        """Whether a request with this id waits for the reply of connection `conn`."""
        pending = self._pending.get(request_id)
        return pending is not None and conn is not None and pending.conn == conn

    def reply(
        self, reply: frames.Reply, *, conn: str, tab_id: str, now: float
    ) -> tuple[list[Effect], tuple[str, str] | None]:
        """A reply from connection `conn`: the effects it brings, and why it is refused
        (a reason and a message) if it is."""
        pending = self._pending.get(reply.id)
        refused = reply_rules.refusal(
            pending, reply, conn=conn, task_id=self.task_id, tab_id=tab_id
        )
        if refused is not None or pending is None:
            return [], refused
        if reply_rules.expired(pending, now):
            return self._time_out(pending), ("expired", "the request had expired")
        return [self._settle(pending, reply_rules.answered(pending, reply))], None

    def revise(self, conn: str, revision: int, view: dict[str, Any]) -> list[Effect]:
        """Connection `conn` reached `revision`: recheck its requests aimed at older ones."""
        effects: list[Effect] = []
        for pending in list(self._pending.values()):
            if pending.conn != conn or pending.revision >= revision:
                continue
            outcome = reply_rules.stale(pending, revision, view)
            if outcome is None:
                pending.revision = revision
                continue
            effects.append(self._settle(pending, outcome))
            effects.append(Send(conn, frames.cancel(pending.id, "stale_target")))
        return effects

    def cancel(self, request_id: str, reason: str) -> list[Effect]:
        pending = self._pending.get(request_id)
        if pending is None:
            return []
        outcome = failure(
            request_id, ToolStatus.FAILED, ErrorCode.CANCELLED, "the action was cancelled"
        )
        return [
            self._settle(pending, outcome),
            Send(pending.conn, frames.cancel(request_id, reason)),
        ]

    def expire(self, request_id: str) -> list[Effect]:
        pending = self._pending.get(request_id)
        if pending is None:
            return []
        return self._time_out(pending)

    def overdue(self, now: float) -> list[Effect]:
        """Time out every request whose time is up at `now`."""
        effects: list[Effect] = []
        for pending in list(self._pending.values()):
            if reply_rules.expired(pending, now):
                effects += self._time_out(pending)
        return effects

    def fail(self, message: str, *, retryable: bool, conn: str | None = None) -> list[Effect]:
        """Fail the requests of connection `conn` (all of them if None) as `unavailable`."""
        return [
            self._settle(pending, tab_unavailable(pending.id, message, retryable=retryable))
            for pending in list(self._pending.values())
            if conn is None or pending.conn == conn
        ]

    def _time_out(self, pending: Pending) -> list[Effect]:
        return [
            self._settle(pending, reply_rules.timed_out(pending)),
            Send(pending.conn, frames.cancel(pending.id, "timeout")),
        ]

    def _settle(self, pending: Pending, outcome: TabOutcome) -> Settle:
        self._pending.pop(pending.id, None)
        return Settle(outcome)
