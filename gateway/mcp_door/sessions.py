"""The MCP sessions each task holds open, so that ending the task ends them too.

Clients of the handshake protocol versions open a session (`Mcp-Session-Id`) that the
SDK's session manager keeps until the client deletes it or it idles out. The SDK binds a
session to the principal that opened it (here: the task), so no other task's token can
use it; what it does not know is when a task ends. This registry notes each session as
the manager creates it and, when the task ends, closes it the way a client would: a
`DELETE` with that session id, under the task's principal, straight to the manager.
Requests of the stateless 2026 protocol carry no session and need nothing here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Scope, Send

from gateway.errors import GatewayError
from gateway.results import ErrorCode

SESSION_HEADER = "mcp-session-id"
# One agent needs one session; a cap per task keeps one token from filling the manager's
# session table (shared by every task) and locking the others out.
MAX_SESSIONS_PER_TASK = 16

log = logging.getLogger(__name__)


class TooManySessions(GatewayError):
    code = ErrorCode.RATE_LIMITED
    http_status = 429
    retryable = True

    def __init__(self) -> None:
        super().__init__(
            f"this task already holds {MAX_SESSIONS_PER_TASK} MCP sessions; close one first"
        )


class TaskSessions:
    def __init__(self, manager_app: ASGIApp) -> None:
        self._manager_app = manager_app
        # session id -> (task id, the principal that opened it)
        self._sessions: dict[str, tuple[str, AuthenticatedUser]] = {}
        self._by_task: dict[str, set[str]] = {}
        # Handshakes under way, by task: they count against the cap until they answer,
        # so a burst of concurrent `initialize` cannot open more than the cap.
        self._opening: dict[str, int] = {}

    def task_ids(self) -> set[str]:
        """Tasks that hold an MCP session."""
        return set(self._by_task)

    def open_for(self, task_id: str) -> list[str]:
        return sorted(self._by_task.get(task_id, ()))

    def _held(self, task_id: str) -> int:
        return len(self._by_task.get(task_id, ())) + self._opening.get(task_id, 0)

    @contextlib.contextmanager
    def opening(self, task_id: str) -> Iterator[None]:
        """Hold a place for a session this request may open; TooManySessions at the cap."""
        if self._held(task_id) >= MAX_SESSIONS_PER_TASK:
            raise TooManySessions()
        self._opening[task_id] = self._opening.get(task_id, 0) + 1
        try:
            yield
        finally:
            left = self._opening[task_id] - 1
            if left:
                self._opening[task_id] = left
            else:
                del self._opening[task_id]

    def _add(self, session_id: str, task_id: str, user: AuthenticatedUser) -> None:
        self._sessions[session_id] = (task_id, user)
        self._by_task.setdefault(task_id, set()).add(session_id)

    def _remove(self, session_id: str) -> tuple[str, AuthenticatedUser] | None:
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            held = self._by_task.get(entry[0])
            if held is not None:
                held.discard(session_id)
                if not held:
                    del self._by_task[entry[0]]
        return entry

    def owner(self, session_id: str) -> str | None:
        entry = self._sessions.get(session_id)
        return entry[0] if entry else None

    def watch(self, scope: Scope, task_id: str, user: AuthenticatedUser, send: Send) -> Send:
        """Wrap `send` to note the session a response opens, or forget one that ended."""
        requested = Headers(scope=scope).get(SESSION_HEADER)
        method = scope.get("method")
        if requested is None and method == "POST":
            return self._noting(task_id, user, send)
        # Only the owner's own requests can tell that its session is gone: another task's
        # token on this id gets the SDK's 404 too, and must not make it untracked.
        if requested is not None and self.owner(requested) == task_id:
            return self._forgetting(requested, method == "DELETE", send)
        return send

    def _noting(self, task_id: str, user: AuthenticatedUser, send: Send) -> Send:
        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = Headers(raw=message.get("headers", [])).get(SESSION_HEADER)
                if opened is not None:
                    self._add(opened, task_id, user)
            await send(message)

        return noting

    def _forgetting(self, session_id: str, deleting: bool, send: Send) -> Send:
        async def forgetting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                # 404: the manager no longer knows it (idled out); 2xx on DELETE: closed.
                if status == 404 or (deleting and status < 300):
                    self._remove(session_id)
            await send(message)

        return forgetting

    async def close_task(self, task_id: str, _reason: str = "") -> None:
        """A task ended: close every session it opened (a `gw.tasks.on_end` listener)."""
        for session_id in self.open_for(task_id):
            await self.close(session_id)

    async def close(self, session_id: str) -> None:
        entry = self._remove(session_id)
        if entry is None:
            return
        _task_id, user = entry
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": "/v1/mcp",
            "raw_path": b"/v1/mcp",
            "root_path": "",
            "query_string": b"",
            "headers": [(SESSION_HEADER.encode(), session_id.encode())],
            "client": None,
            "server": None,
            "user": user,
        }
        status: list[int] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await self._manager_app(scope, receive, send)
        log.info("closed MCP session %s…: %s", session_id[:8], status[0] if status else "-")
