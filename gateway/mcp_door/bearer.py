"""The front of the MCP door: Host/Origin guard and the `agent` bearer check, per request.

Every HTTP request to `/v1/mcp` (each POST, the GET stream, the DELETE) is checked here
before the SDK sees it: the Host and Origin first, then the bearer token, verified for the
`agent` purpose only (a `tab` or `bridge` token fails its signature check under the agent
salt) and against the stored task (ended or expired tasks fail). The identity that comes
back is the stored one; it travels to the tool handlers inside the ASGI scope of this very
request, never through anything the client sends in a message.

The SDK's session manager ties a session to the principal that opened it; the principal
is the task, so a session can be continued with a fresh agent token of the same task but
never with another task's token.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import AuthError, GatewayError
from gateway.core.identity import TaskIdentity
from gateway.core.ports import TaskLookup
from gateway.core.tokens import Purpose
from gateway.http.edge import credential, error_response
from gateway.http.hosts import HostPolicy
from gateway.mcp_door.dispatch import is_modern
from gateway.mcp_door.sessions import SESSION_HEADER, TaskSessions, TooManySessions

IDENTITY_KEY = "gateway.core.identity"
ISSUER = "gateway"


def identity_of(request: Any) -> TaskIdentity:
    """The authenticated identity of the HTTP request that carried an MCP message."""
    scope = getattr(request, "scope", None)
    identity = scope.get(IDENTITY_KEY) if isinstance(scope, dict) else None
    if not isinstance(identity, TaskIdentity):
        # Only reachable if the SDK were mounted without this front; refuse, never guess.
        raise AuthError("this MCP message carries no authenticated task")
    return identity


def principal(identity: TaskIdentity) -> AuthenticatedUser:
    """The SDK-side principal of a task: what a session is bound to."""
    return AuthenticatedUser(
        AccessToken(
            token="",  # never kept: the principal compares ids, not secrets
            client_id=identity.task_id,
            scopes=sorted(identity.scopes),
            subject=identity.actor.id,
            claims={"iss": ISSUER},
        )
    )


def _opens_session(scope: Scope, headers: Headers) -> bool:
    return scope.get("method") == "POST" and SESSION_HEADER not in headers and not is_modern(scope)


class BearerFront:
    """ASGI wrapper around the SDK's streamable HTTP app."""

    def __init__(
        self, tasks: TaskLookup, app: ASGIApp, policy: HostPolicy, sessions: TaskSessions
    ) -> None:
        self.tasks = tasks
        self.app = app
        self.policy = policy
        self.sessions = sessions
        self._principals: dict[str, AuthenticatedUser] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        token: str | None = None
        try:
            self.policy.check_origin(headers.get("origin"))
            token = credential(Request(scope))
            identity = await self.tasks.authenticate(token, Purpose.AGENT)
        except AuthError as exc:
            if token:
                await self._close_refused_session(token, headers.get(SESSION_HEADER))
            await error_response(exc)(scope, receive, send)
            return
        except GatewayError as exc:
            await error_response(exc)(scope, receive, send)
            return
        user = self._principals.get(identity.task_id)
        if user is None:
            user = self._principals[identity.task_id] = principal(identity)
        scope = {**scope, "user": user, IDENTITY_KEY: identity}
        watched = self.sessions.watch(scope, identity.task_id, user, send)
        if not _opens_session(scope, headers):
            # A POST of a session carries a call (or its answer): the session is busy until
            # it is over, and never closed to make room meanwhile.
            with self.sessions.in_use(
                headers.get(SESSION_HEADER), identity.task_id, call=scope.get("method") == "POST"
            ):
                await self.app(scope, receive, watched)
            return
        try:
            async with self.sessions.opening(identity.task_id):
                await self.app(scope, receive, watched)
        except TooManySessions as exc:
            await error_response(exc)(scope, receive, send)

    def forget(self, task_id: str) -> None:
        self._principals.pop(task_id, None)

    async def _close_refused_session(self, token: str, session_id: str | None) -> None:
        """A genuine token of an ended or expired task closes that task's session.

        Only when the token's signature verifies and names the task that owns the session,
        so a stranger who learned a session id cannot close it.
        """
        if session_id is None:
            return
        try:
            claims = self.tasks.claims(token, Purpose.AGENT)
        except AuthError:
            return
        if self.sessions.owner(session_id) == claims.task_id:
            await self.sessions.close(session_id)
