"""The tab channel of one task as a state machine with no I/O.

Inputs are plain method calls (a tab connected, a text frame arrived, an action is to be
sent, time passed, the connection dropped, the task ended); each returns the effects the
I/O layer must carry out, in order: frames to send, connections to close, requests to
settle, frames rejected (to count and record), tool calls to start or cancel. Time is an
argument (`now`, seconds), never read here, so every rule is testable by calling methods.

The reply rules (CONTRACT section 5): a reply is accepted only from the connection the
request was sent to, carrying that connection's task and tab ids and the request's
revision, before the request expires. Anything else is rejected with an `error` frame and
the request stays pending for its real tab. A `state` frame that moves the revision
rechecks every pending request aimed at an older revision against the new view: it is
re-aimed at the new revision where its target still holds, and fails as `stale_target`
where it does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gateway.core.results import ErrorCode, ToolStatus
from gateway.tabs import frames
from gateway.tabs.actions import UIAction, target_holds
from gateway.tabs.frames import IncomingFrame
from gateway.tabs.outcome import TabOutcome, failure, succeeded, tab_unavailable

_FRAME = TypeAdapter[IncomingFrame](IncomingFrame)

# Codes a page may give in a failed reply that keep their meaning; any other code becomes
# `handler_error` (the page's own code is kept in the details).
_PAGE_CODES = {
    ErrorCode.STALE_TARGET.value,
    ErrorCode.CANCELLED.value,
    ErrorCode.INVALID_INPUT.value,
}


# --- effects -------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    conn: str
    frame: dict[str, Any]


@dataclass(frozen=True)
class Close:
    conn: str
    code: int
    reason: str


@dataclass(frozen=True)
class Settle:
    """A request reached its terminal outcome; whoever awaits it gets `outcome`."""

    outcome: TabOutcome


@dataclass(frozen=True)
class Rejected:
    """A frame was refused: count it and record it as evidence (the `error` frame is a
    separate `Send`)."""

    conn: str
    reason: str
    message: str
    frame_type: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StartCall:
    conn: str
    call_id: str
    tool: str
    input: dict[str, Any]
    webmcp: bool


@dataclass(frozen=True)
class CancelCall:
    conn: str
    call_id: str


@dataclass(frozen=True)
class Answer:
    """A person answered an approval in the tab; the hub hands it to the approvals desk
    (which checks the nonce, the approver and the expiry)."""

    conn: str
    approval_id: str
    decision: str
    scope: str
    nonce: str


Effect = Send | Close | Settle | Rejected | StartCall | CancelCall | Answer


@dataclass(frozen=True)
class ChannelLimits:
    max_frame_bytes: int = 64 * 1024
    max_pending: int = 64  # UI action requests awaiting this connection's reply
    max_calls: int = 16  # tool calls from the page running at once
    rate_per_s: float = 200.0  # frames a tab may send per second, on average...
    burst: int = 400  # ...and in a burst (replies to pending requests always pass)
    max_strikes: int = 10  # refused frames before the connection is closed (1008)
    heartbeat_s: float = 15.0  # a ping every heartbeat; no pong within two: dropped


# --- state ---------------------------------------------------------------------------


@dataclass
class _Bucket:
    rate: float
    burst: float
    tokens: float
    at: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class _Conn:
    id: str
    tab_id: str
    revision: int
    view: dict[str, Any]
    bucket: _Bucket
    connected_at: float
    last_seen: float
    ping_at: float | None = None  # when the unanswered ping went out
    next_ping: float = 0.0
    strikes: int = 0
    calls: set[str] = field(default_factory=set)


@dataclass
class _Pending:
    id: str
    action: UIAction
    conn: str
    revision: int
    expires_at: float


class TabChannel:
    """One task's channel: at most one live tab connection and its pending requests."""

    def __init__(self, task_id: str, limits: ChannelLimits | None = None) -> None:
        self.task_id = task_id
        self.limits = limits or ChannelLimits()
        self._conn: _Conn | None = None
        self._pending: dict[str, _Pending] = {}
        # Approvals waiting for a person, shown in the tab (again after a reconnect); with
        # the revision each was last shown at, which its answer must name.
        self._approvals: dict[str, dict[str, Any]] = {}
        self._shown_at: dict[str, int] = {}
        # Shown and not yet answered in this showing: its one answer passes the rate limit,
        # as a reply to a pending request does (the gateway bounds how many there are).
        self._unanswered: set[str] = set()
        self.ended: str | None = None

    # -- queries ----------------------------------------------------------------------

    @property
    def conn_id(self) -> str | None:
        return self._conn.id if self._conn else None

    def pending_ids(self) -> list[str]:
        return list(self._pending)

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
            bucket=_Bucket(limits.rate_per_s, limits.burst, limits.burst, now),
            connected_at=now,
            last_seen=now,
            next_ping=now + limits.heartbeat_s,
        )
        # A pending approval is shown again to the tab that took over (or came back).
        for approval_id in self._approvals:
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
        self._shown_at.clear()
        self._unanswered.clear()
        effects: list[Effect] = []
        if self._conn is not None:
            effects += self._drop(
                self._conn,
                "the task has ended",
                retryable=False,
                bye="task_ended",
                close=(frames.CLOSE_TASK_ENDED, "the task has ended"),
            )
        for pending in list(self._pending.values()):
            effects.append(
                self._settle(
                    pending, tab_unavailable(pending.id, "the task has ended", retryable=False)
                )
            )
        return effects

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
        self._approvals[shown["id"]] = shown
        return [self._show(self._conn, shown["id"])] if self._conn is not None else []

    def close_approval(self, approval_id: str, status: str) -> list[Effect]:
        """The approval has its outcome (from any channel): take it out of the tab."""
        if self._approvals.pop(approval_id, None) is None:
            return []
        self._shown_at.pop(approval_id, None)
        self._unanswered.discard(approval_id)
        if self._conn is None:
            return []
        return [Send(self._conn.id, frames.approval_closed(approval_id, status))]

    def approvals_shown(self) -> list[str]:
        return list(self._approvals)

    def _show(self, conn: _Conn, approval_id: str) -> Send:
        self._shown_at[approval_id] = conn.revision
        self._unanswered.add(approval_id)
        frame = frames.approval_request(
            self._approvals[approval_id], self.task_id, conn.tab_id, conn.revision
        )
        return Send(conn.id, frame)

    def _approval(self, conn: _Conn, answer: frames.Approval) -> list[Effect]:
        def refuse(reason: str, message: str) -> list[Effect]:
            claimed = {
                "approval_id": answer.id,
                "claimed_task_id": answer.task_id,
                "claimed_tab_id": answer.tab_id,
                "claimed_revision": answer.revision,
            }
            return self._refuse(
                conn, reason, message, frame_type="approval", details=claimed, request_id=answer.id
            )

        if answer.id not in self._approvals:
            return refuse("unknown_approval", "no approval with this id waits in this tab")
        if answer.task_id != self.task_id:
            return refuse("wrong_task", "the answer names another task")
        if answer.tab_id != conn.tab_id:
            return refuse("wrong_tab", "the answer names another tab")
        if answer.revision != self._shown_at.get(answer.id):
            return refuse("stale_revision", "the answer names another showing of the approval")
        if not self._approvals[answer.id].get("answerable"):
            return refuse("not_answerable", "this approval is not answered in this tab")
        self._unanswered.discard(answer.id)
        return [Answer(conn.id, answer.id, answer.decision, answer.scope, answer.nonce)]

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
        pending = _Pending(request_id, action, conn.id, conn.revision, now + timeout_s)
        self._pending[request_id] = pending
        frame = frames.request(
            request_id, self.task_id, conn.revision, action.wire(), pending.expires_at
        )
        return [Send(conn.id, frame)]

    def cancel(self, request_id: str, reason: str = "cancelled") -> list[Effect]:
        """The awaiting side gave up (its caller cancelled): fail it and tell the tab."""
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
        """The request's time is up (the I/O layer's timer fired)."""
        pending = self._pending.get(request_id)
        if pending is None:
            return []
        return self._timeout(pending)

    def tick(self, now: float) -> list[Effect]:
        """Time passed: expire overdue requests, send a due ping, drop a silent tab."""
        effects: list[Effect] = []
        for pending in list(self._pending.values()):
            if now >= pending.expires_at:
                effects += self._timeout(pending)
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
        # A str of n characters is at most 4n bytes: encode only when that could be too many.
        size = (
            len(text)
            if isinstance(text, bytes) or len(text) * 4 <= self.limits.max_frame_bytes
            else len(text.encode())
        )
        if size > self.limits.max_frame_bytes:
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
        within_rate = current.bucket.take(now)
        if isinstance(text, str) and '"reply"' in text:
            # Replies are most of what a busy tab sends: one that names itself a reply is
            # parsed and validated in one pass, straight from the text. Anything else, or a
            # reply that does not validate, takes the general path (which says why).
            try:
                reply = frames.Reply.model_validate_json(text)
            except ValueError:
                pass  # the general path below parses it again to say why
            else:
                if within_rate or self._answers_here(reply.id):
                    return self._reply(current, reply, now)
        if isinstance(text, bytes):
            return self._refuse(current, "invalid_frame", "frames are JSON text")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError):
            return self._refuse(current, "invalid_frame", "the frame is not valid JSON")
        if not within_rate and not self._answers_pending(raw):
            # Replies to this tab's pending requests are bounded by what the gateway sent,
            # so they pass; everything else beyond the rate is refused.
            return self._refuse(current, "rate_limited", "the tab is sending frames too fast")
        claimed_type = raw.get("type") if isinstance(raw, dict) else None
        frame_type = claimed_type if isinstance(claimed_type, str) else None
        try:
            frame = _FRAME.validate_python(raw)
        except ValidationError as exc:
            return self._refuse(
                current,
                "invalid_frame",
                f"the frame does not match the {frame_type or 'tab'} frame schema",
                frame_type=frame_type,
                details={"errors": exc.error_count()},
                request_id=raw.get("id") if isinstance(raw, dict) else None,
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

    def _answers_pending(self, raw: Any) -> bool:
        if not isinstance(raw, dict):
            return False
        if raw.get("type") == "approval":
            return raw.get("id") in self._unanswered
        if raw.get("type") != "reply":
            return False
        request_id = raw.get("id")
        return isinstance(request_id, str) and self._answers_here(request_id)

    def _answers_here(self, request_id: str) -> bool:
        """Whether a request with this id waits for the current connection's reply."""
        pending = self._pending.get(request_id)
        return pending is not None and self._conn is not None and pending.conn == self._conn.id

    def _reply(self, conn: _Conn, reply: frames.Reply, now: float) -> list[Effect]:
        pending = self._pending.get(reply.id)
        if pending is None:
            return self._refuse_reply(
                conn, reply, "unknown_request", "no pending request has this id on this channel"
            )
        if pending.conn != conn.id:
            return self._refuse_reply(
                conn, reply, "wrong_connection", "the request was sent to another connection"
            )
        if reply.task_id != self.task_id:
            return self._refuse_reply(conn, reply, "wrong_task", "the reply names another task")
        if reply.tab_id != conn.tab_id:
            return self._refuse_reply(conn, reply, "wrong_tab", "the reply names another tab")
        if reply.revision != pending.revision:
            return self._refuse_reply(
                conn,
                reply,
                "stale_revision",
                f"the request is aimed at revision {pending.revision}",
            )
        if now >= pending.expires_at:
            return [
                *self._timeout(pending),
                *self._refuse_reply(conn, reply, "expired", "the request had expired"),
            ]
        if reply.ok:
            return [self._settle(pending, succeeded(pending.id, reply.result or {}))]
        error = reply.error or frames.ReplyError(code="handler_error", message="")
        code = error.code if error.code in _PAGE_CODES else ErrorCode.HANDLER_ERROR.value
        message = error.message[:500] or "the page could not apply the action"
        details = None if code == error.code else {"tab_code": error.code[:64]}
        return [
            self._settle(
                pending, failure(pending.id, ToolStatus.FAILED, code, message, details=details)
            )
        ]

    def _refuse_reply(
        self, conn: _Conn, reply: frames.Reply, reason: str, message: str
    ) -> list[Effect]:
        claimed = {
            "request_id": reply.id,
            "claimed_task_id": reply.task_id,
            "claimed_tab_id": reply.tab_id,
            "claimed_revision": reply.revision,
        }
        return self._refuse(
            conn, reason, message, frame_type="reply", details=claimed, request_id=reply.id
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
        effects: list[Effect] = []
        for pending in list(self._pending.values()):
            if pending.conn != conn.id or pending.revision >= state.revision:
                continue
            if target_holds(pending.action, state.view):
                pending.revision = state.revision
                continue
            outcome = failure(
                pending.id,
                ToolStatus.FAILED,
                ErrorCode.STALE_TARGET,
                "the page moved away from the action's target",
                details={"revision": state.revision},
            )
            effects.append(self._settle(pending, outcome))
            effects.append(Send(conn.id, frames.cancel(pending.id, "stale_target")))
        return effects

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

    def _timeout(self, pending: _Pending) -> list[Effect]:
        outcome = failure(
            pending.id,
            ToolStatus.TIMEOUT,
            ErrorCode.TIMEOUT,
            "the tab did not answer in time",
            retryable=True,
        )
        return [
            self._settle(pending, outcome),
            Send(pending.conn, frames.cancel(pending.id, "timeout")),
        ]

    def _settle(self, pending: _Pending, outcome: TabOutcome) -> Settle:
        self._pending.pop(pending.id, None)
        return Settle(outcome)

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
        for pending in list(self._pending.values()):
            if pending.conn == conn.id:
                effects.append(
                    self._settle(pending, tab_unavailable(pending.id, message, retryable=retryable))
                )
        effects += [CancelCall(conn.id, call_id) for call_id in sorted(conn.calls)]
        conn.calls.clear()
        if bye is not None:
            effects.append(Send(conn.id, frames.bye(bye)))
        if close is not None:
            effects.append(Close(conn.id, *close))
        return effects
