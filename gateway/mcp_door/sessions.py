"""The MCP sessions each task holds open: capped, never a lock-out, ended with the task.

Clients of the handshake protocol versions open a session (`Mcp-Session-Id`) that the
SDK's session manager keeps until the client deletes it or it idles out. Many clients
never delete theirs (the TypeScript SDK's `close()` sends no `DELETE`), so a reconnecting
agent leaves a trail of them. This registry notes each session as the manager creates it
and keeps the task's count at most `cap`:

- a new handshake at the cap closes the task's least recently used idle session (its next
  request gets 404, the protocol's signal to initialize again) instead of refusing the new
  one; a session with a call in flight is never closed this way;
- handshakes under way count against the cap, so no burst of `initialize` passes it; only
  when every session is busy is a handshake refused (429, retryable);
- when the task ends, every session it opened is closed.

The SDK binds a session to the principal that opened it (the task), so no other task's
token can use one; only the owner's own requests can tell that a session is gone. A
session is closed the way a client would: a `DELETE` with its id, under the task's
principal, straight to the manager. Requests of the stateless 2026 protocol carry no
session and need nothing here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Scope, Send

from gateway.core.errors import GatewayError
from gateway.core.results import ErrorCode

SESSION_HEADER = "mcp-session-id"

log = logging.getLogger(__name__)


class TooManySessions(GatewayError):
    code = ErrorCode.RATE_LIMITED
    http_status = 429
    retryable = True

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"every one of this task's {cap} MCP sessions has a call in flight; retry when "
            "one has answered"
        )


@dataclass
class _Session:
    task_id: str
    user: AuthenticatedUser
    last_used: float
    in_flight: int = 0


class TaskSessions:
    def __init__(self, manager_app: ASGIApp, *, cap: int = 16) -> None:
        self._manager_app = manager_app
        self.cap = cap
        self._sessions: dict[str, _Session] = {}
        self._by_task: dict[str, set[str]] = {}
        # Handshakes under way, by task: they count against the cap until they answer.
        self._opening: dict[str, int] = {}
        self.evicted = 0

    def task_ids(self) -> set[str]:
        """Tasks that hold an MCP session."""
        return set(self._by_task)

    def open_for(self, task_id: str) -> list[str]:
        return sorted(self._by_task.get(task_id, ()))

    def owner(self, session_id: str) -> str | None:
        entry = self._sessions.get(session_id)
        return entry.task_id if entry else None

    def _held(self, task_id: str) -> int:
        return len(self._by_task.get(task_id, ())) + self._opening.get(task_id, 0)

    # -- a handshake ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def opening(self, task_id: str) -> AsyncIterator[None]:
        """Hold a place for the session a handshake may open, making room at the cap."""
        while self._held(task_id) >= self.cap:
            idle = self._least_recently_used_idle(task_id)
            if idle is None:
                raise TooManySessions(self.cap)
            self.evicted += 1
            log.info("MCP session %s… closed to make room for a new one", idle[:8])
            await self.close(idle)
        self._opening[task_id] = self._opening.get(task_id, 0) + 1
        try:
            yield
        finally:
            left = self._opening[task_id] - 1
            if left:
                self._opening[task_id] = left
            else:
                del self._opening[task_id]

    def _least_recently_used_idle(self, task_id: str) -> str | None:
        idle = [
            (self._sessions[sid].last_used, sid)
            for sid in self._by_task.get(task_id, ())
            if self._sessions[sid].in_flight == 0
        ]
        return min(idle)[1] if idle else None

    # -- a session's requests ---------------------------------------------------------------

    @contextlib.contextmanager
    def in_use(self, session_id: str | None, task_id: str, *, call: bool) -> Iterator[None]:
        """A request of the owner's session: it is used now, and a call keeps it busy."""
        entry = self._sessions.get(session_id or "")
        if entry is None or entry.task_id != task_id:
            yield
            return
        entry.last_used = time.monotonic()
        entry.in_flight += int(call)
        try:
            yield
        finally:
            entry.in_flight -= int(call)
            entry.last_used = time.monotonic()

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

    def _add(self, session_id: str, task_id: str, user: AuthenticatedUser) -> None:
        self._sessions[session_id] = _Session(task_id, user, time.monotonic())
        self._by_task.setdefault(task_id, set()).add(session_id)

    def _remove(self, session_id: str) -> _Session | None:
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            held = self._by_task.get(entry.task_id)
            if held is not None:
                held.discard(session_id)
                if not held:
                    del self._by_task[entry.task_id]
        return entry

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

    # -- closing --------------------------------------------------------------------------

    async def close_task(self, task_id: str, _reason: str = "") -> None:
        """A task ended: close every session it opened (a `gw.tasks.on_end` listener)."""
        for session_id in self.open_for(task_id):
            await self.close(session_id)

    async def close(self, session_id: str) -> None:
        entry = self._remove(session_id)
        if entry is None:
            return
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
            "user": entry.user,
        }
        status: list[int] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await self._manager_app(scope, receive, send)
        log.info("closed MCP session %s…: %s", session_id[:8], status[0] if status else "-")
