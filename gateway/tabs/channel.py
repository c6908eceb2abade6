"""The tab channel of one task as a state machine with no I/O.

Inputs are plain method calls (a tab connected, a text frame arrived, an action is to be
sent, time passed, the connection dropped, the task ended); each returns the effects the
I/O layer must carry out, in order: frames to send, connections to close, requests to
settle, frames rejected (to count and record), tool calls to start or cancel. Time is an
argument (`now`, seconds), never read here, so every rule is testable by calling methods.

The parts it is made of, each in a module of its own: the effects (`effects.py`), the
limits and the rate bucket (`limits.py`), reading a frame off the wire (`intake.py`), the
pending requests (`requests.py`) and the rules that end them (`reply_rules.py`: a reply
is accepted only from the connection the request was sent to, with its task and tab ids
and its revision, before it expires; anything else is refused with an `error` frame and
the request stays pending for its real tab), the approvals shown (`tab_approvals.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.results import ErrorCode, ToolStatus
from gateway.tabs import frames, intake
from gateway.tabs.actions import UIAction
from gateway.tabs.effects import (
    Answer,
    CancelCall,
    Close,
    Effect,
    Rejected,
    Send,
    Settle,
    StartCall,
)
from gateway.tabs.limits import Bucket, ChannelLimits
from gateway.tabs.outcome import failure, tab_unavailable
from gateway.tabs.requests import Requests
from gateway.tabs.tab_approvals import TabApprovals


@dataclass
class _Conn:
    id: str
    tab_id: str
    revision: int
    view: dict[str, Any]
    bucket: Bucket
    connected_at: float
    last_seen: float
    ping_at: float | None = None  # when the unanswered ping went out
    next_ping: float = 0.0
    strikes: int = 0
    calls: set[str] = field(default_factory=set)


class TabChannel:
    """One task's channel: at most one live tab connection and its pending requests."""

    def __init__(self, task_id: str, limits: ChannelLimits | None = None) -> None:
        self.task_id = task_id
        self.limits = limits or ChannelLimits()
        self._conn: _Conn | None = None
        self._pending = Requests(task_id)
        self._approvals = TabApprovals(task_id)
        self.ended: str | None = None

    # -- queries ----------------------------------------------------------------------

    @property
    def conn_id(self) -> str | None:
        return self._conn.id if self._conn else None

    def pending_ids(self) -> list[str]:
        return self._pending.ids()

    def has_pending(self) -> bool:
        return bool(self._pending)

    def describe(self) -> dict[str, Any]:
        """Tab state for `GET /v1/tasks/{id}`."""
        conn = self._conn
        return {
            "connected": conn is not None,
            "tab_id": conn.tab_id if conn else None,
            "revision": conn.revision if conn else None,
            "view": conn.view.get("view") if conn else None,
            "pending_requests": len(self._pending),
            "running_calls": len(conn.calls) if conn else 0,
            "ended": self.ended,
        }

    def revision(self) -> int | None:
        return self._conn.revision if self._conn else None

    # -- connection lifecycle ---------------------------------------------------------

    def connect(
        self, conn: str, tab_id: str, revision: int, view: dict[str, Any], now: float
    ) -> list[Effect]:
        """A tab said a valid hello. A previous tab of the task is superseded (4001)."""
        effects: list[Effect] = []
        if self.ended is not None:
            return [
                Send(conn, frames.bye("task_ended")),
                Close(conn, frames.CLOSE_TASK_ENDED, "the task has ended"),
            ]
        old = self._conn
        if old is not None:
            effects += self._drop(
                old,
                "a newer tab of this task took over the channel",
                retryable=True,
                bye="superseded",
                close=(frames.CLOSE_SUPERSEDED, "superseded by a newer tab"),
            )
        limits = self.limits
        self._conn = _Conn(
            id=conn,
            tab_id=tab_id,
            revision=revision,
            view=view,
            bucket=Bucket(limits.rate_per_s, limits.burst, limits.burst, now),
            connected_at=now,
            last_seen=now,
            next_ping=now + limits.heartbeat_s,
        )
        # A pending approval is shown again to the tab that took over (or came back).
        for approval_id in self._approvals.ids():
            effects.append(self._show(self._conn, approval_id))
        return effects

    def disconnect(self, conn: str) -> list[Effect]:
        """The connection is gone (closed by either side or dropped)."""
        current = self._conn
        if current is None or current.id != conn:
            return []
        return self._drop(current, "the dashboard tab disconnected", retryable=True)

    def end(self, reason: str = "task_ended") -> list[Effect]:
        """The task ended: say bye, close 4002, fail everything pending."""
        self.ended = reason
        self._approvals.clear()
        effects: list[Effect] = []
        if self._conn is not None:
            effects += self._drop(
                self._conn,
                "the task has ended",
                retryable=False,
                bye="task_ended",
                close=(frames.CLOSE_TASK_ENDED, "the task has ended"),
            )
        return effects + self._pending.fail("the task has ended", retryable=False)

    def token_expired(self, conn: str) -> list[Effect]:
        """The tab token this connection authenticated with expired: bye, close 4003."""
        current = self._conn
        if current is None or current.id != conn:
            return []
        return self._drop(
            current,
            "the tab's token expired",
            retryable=True,
            bye="token_expired",
            close=(frames.CLOSE_TOKEN_EXPIRED, "the tab token expired"),
        )

    # -- approvals --------------------------------------------------------------------

    def show_approval(self, shown: dict[str, Any]) -> list[Effect]:
        """An approval waits for a person: show it in the tab now, and on every connect."""
        if self.ended is not None:
            return []
        approval_id = self._approvals.add(shown)
        return [self._show(self._conn, approval_id)] if self._conn is not None else []

    def close_approval(self, approval_id: str, status: str) -> list[Effect]:
        """The approval has its outcome (from any channel): take it out of the tab."""
        if not self._approvals.remove(approval_id) or self._conn is None:
            return []
        return [Send(self._conn.id, frames.approval_closed(approval_id, status))]

    def approvals_shown(self) -> list[str]:
        return self._approvals.ids()

    def _show(self, conn: _Conn, approval_id: str) -> Send:
        return self._approvals.show(conn.id, conn.tab_id, conn.revision, approval_id)

    def _approval(self, conn: _Conn, answer: frames.Approval) -> list[Effect]:
        verdict = self._approvals.answer(conn.id, conn.tab_id, answer)
        if isinstance(verdict, Answer):
            return [verdict]
        return self._refuse_answer(conn, answer, "approval_id", *verdict)

    # -- UI action requests -----------------------------------------------------------

    def request(
        self, request_id: str, action: UIAction, now: float, timeout_s: float
    ) -> list[Effect]:
        """Send a UI action to the task's tab, aimed at its current revision."""
        if request_id in self._pending:
            raise ValueError(f"request id {request_id!r} is already pending")
        conn = self._conn
        if self.ended is not None:
            return [Settle(tab_unavailable(request_id, "the task has ended", retryable=False))]
        if conn is None:
            return [
                Settle(tab_unavailable(request_id, "no dashboard tab is connected for this task"))
            ]
        # Every pending request is the current connection's: a connection that goes fails
        # its own (`_drop`).
        if len(self._pending) >= self.limits.max_pending:
            return [
                Settle(
                    failure(
                        request_id,
                        ToolStatus.UNAVAILABLE,
                        ErrorCode.RATE_LIMITED,
                        f"the tab already has {self.limits.max_pending} actions pending",
                        retryable=True,
                    )
                )
            ]
        pending = self._pending.open(request_id, action, conn.id, conn.revision, now + timeout_s)
        frame = frames.request(
            request_id, self.task_id, conn.revision, action.wire(), pending.expires_at
        )
        return [Send(conn.id, frame)]

    def cancel(self, request_id: str, reason: str = "cancelled") -> list[Effect]:
        """The awaiting side gave up (its caller cancelled): fail it and tell the tab."""
        return self._pending.cancel(request_id, reason)

    def expire(self, request_id: str) -> list[Effect]:
        """The request's time is up (the I/O layer's timer fired)."""
        return self._pending.expire(request_id)

    def tick(self, now: float) -> list[Effect]:
        """Time passed: expire overdue requests, send a due ping, drop a silent tab."""
        effects = self._pending.overdue(now)
        conn = self._conn
        if conn is not None:
            beat = self.limits.heartbeat_s
            if conn.ping_at is not None and now - conn.ping_at >= 2 * beat:
                effects += self._drop(
                    conn,
                    "the dashboard tab stopped answering pings",
                    retryable=True,
                    close=(frames.CLOSE_INTERNAL, "no pong"),
                )
            elif conn.ping_at is None and now >= conn.next_ping:
                conn.ping_at = now
                effects.append(Send(conn.id, frames.ping()))
        return effects

    # -- incoming frames --------------------------------------------------------------

    def receive(self, conn: str, text: str | bytes, now: float) -> list[Effect]:
        """One frame from a tab connection, as it came off the wire."""
        current = self._conn
        if current is None or current.id != conn:
            return [
                Send(conn, frames.error("not_current", "this connection is not the task's tab"))
            ]
        if intake.too_large(text, self.limits.max_frame_bytes):
            return self._drop(
                current,
                "the tab sent an oversized frame",
                retryable=True,
                close=(
                    frames.CLOSE_TOO_LARGE,
                    f"frames are limited to {self.limits.max_frame_bytes} bytes",
                ),
            )
        current.last_seen = now
        frame = intake.read(text, within_rate=current.bucket.take(now), answers=self._answers)
        if isinstance(frame, intake.Refusal):
            return self._refuse(
                current,
                frame.reason,
                frame.message,
                frame_type=frame.frame_type,
                details=frame.details,
                request_id=frame.request_id,
            )
        if isinstance(frame, frames.Reply):
            return self._reply(current, frame, now)
        if isinstance(frame, frames.State):
            return self._state(current, frame)
        if isinstance(frame, frames.ToolCall):
            return self._tool_call(current, frame)
        if isinstance(frame, frames.Cancel):
            # A cancel for a call that already finished is a benign race: nothing to do.
            return [CancelCall(current.id, frame.id)] if frame.id in current.calls else []
        if isinstance(frame, frames.Approval):
            return self._approval(current, frame)
        if isinstance(frame, frames.Pong):
            current.ping_at = None
            current.next_ping = now + self.limits.heartbeat_s
            return []
        return self._refuse(current, "invalid_frame", "hello was already said", frame_type="hello")

    def call_finished(self, conn: str, call_id: str, result: dict[str, Any]) -> list[Effect]:
        """A tool call the page started reached its terminal result."""
        current = self._conn
        if current is None or current.id != conn or call_id not in current.calls:
            return []
        current.calls.discard(call_id)
        return [Send(conn, frames.tool_result(call_id, result))]

    # -- internals --------------------------------------------------------------------

    def _answers(self, frame_type: Any, frame_id: Any) -> bool:
        """Whether a frame of this type and id answers what the tab was asked (so it passes
        the rate limit)."""
        if frame_type == "approval":
            return self._approvals.awaits(frame_id)
        if frame_type != "reply":
            return False
        return isinstance(frame_id, str) and self._answers_here(frame_id)

    def _answers_here(self, request_id: str) -> bool:
        """Whether a request with this id waits for the current connection's reply."""
        return self._pending.waits_for(request_id, self.conn_id)

    def _reply(self, conn: _Conn, reply: frames.Reply, now: float) -> list[Effect]:
        effects, refused = self._pending.reply(reply, conn=conn.id, tab_id=conn.tab_id, now=now)
        if refused is not None:
            effects += self._refuse_answer(conn, reply, "request_id", *refused)
        return effects

    def _refuse_answer(
        self,
        conn: _Conn,
        answer: frames.Reply | frames.Approval,
        id_key: str,
        reason: str,
        message: str,
    ) -> list[Effect]:
        """Refuse a reply to a request, or an answer to an approval, recording what it
        claimed to answer (its id under `id_key`, and the task, tab and revision it named)."""
        claimed = {
            id_key: answer.id,
            "claimed_task_id": answer.task_id,
            "claimed_tab_id": answer.tab_id,
            "claimed_revision": answer.revision,
        }
        return self._refuse(
            conn, reason, message, frame_type=answer.type, details=claimed, request_id=answer.id
        )

    def _state(self, conn: _Conn, state: frames.State) -> list[Effect]:
        if state.revision <= conn.revision:
            return self._refuse(
                conn,
                "stale_revision",
                f"revisions only grow; the tab is at {conn.revision}",
                frame_type="state",
                details={"claimed_revision": state.revision},
            )
        conn.revision = state.revision
        conn.view = state.view
        return self._pending.revise(conn.id, state.revision, state.view)

    def _tool_call(self, conn: _Conn, call: frames.ToolCall) -> list[Effect]:
        if call.id in conn.calls:
            return self._refuse(
                conn, "duplicate_call", "a call with this id is running", frame_type="tool_call"
            )
        if len(conn.calls) >= self.limits.max_calls:
            result = {
                "call_id": call.id,
                "tool": call.tool[:128],
                "status": ToolStatus.UNAVAILABLE.value,
                "error": {
                    "code": ErrorCode.RATE_LIMITED.value,
                    "message": f"at most {self.limits.max_calls} calls may run at once",
                    "retryable": True,
                },
            }
            return [Send(conn.id, frames.tool_result(call.id, result))]
        conn.calls.add(call.id)
        return [StartCall(conn.id, call.id, call.tool, call.input or {}, call.via == "webmcp")]

    def _refuse(
        self,
        conn: _Conn,
        reason: str,
        message: str,
        *,
        frame_type: str | None = None,
        details: dict[str, Any] | None = None,
        request_id: Any = None,
    ) -> list[Effect]:
        conn.strikes += 1
        extra = {"id": request_id} if isinstance(request_id, str) else {}
        effects: list[Effect] = [
            Rejected(conn.id, reason, message, frame_type, details or {}),
            Send(conn.id, frames.error(reason, message, **extra)),
        ]
        if conn.strikes >= self.limits.max_strikes:
            effects += self._drop(
                conn,
                "the tab sent too many refused frames",
                retryable=True,
                close=(frames.CLOSE_POLICY, "too many refused frames"),
            )
        return effects

    def _drop(
        self,
        conn: _Conn,
        message: str,
        *,
        retryable: bool,
        bye: str | None = None,
        close: tuple[int, str] | None = None,
    ) -> list[Effect]:
        """Detach a connection: fail its pending requests, cancel its calls, close it."""
        effects: list[Effect] = []
        if self._conn is conn:
            self._conn = None
        effects += self._pending.fail(message, retryable=retryable, conn=conn.id)
        effects += [CancelCall(conn.id, call_id) for call_id in sorted(conn.calls)]
        conn.calls.clear()
        if bye is not None:
            effects.append(Send(conn.id, frames.bye(bye)))
        if close is not None:
            effects.append(Close(conn.id, *close))
        return effects
