"""Who may look at the console: the control plane's party, or a person the host signs in.

Three ways in, and no other:

- `Authorization: Bearer <control key>` (scripts: the export, the JSON listings);
- a session cookie made by presenting the control key on the sign-in page, signed with the
  gateway's secret keys under a salt of its own and bound to a digest of the control key
  (changing the key signs everyone out);
- the host's own sign-in: a `HostSignIn` the host provides in `gw.services`, whose check
  reads the request (its own cookie) and names the person and the organizations they see.

A task token of any purpose opens none of them: a bearer credential that is not the
control key is refused outright, never tried as a token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

from gateway.core.errors import AuthError, Forbidden
from gateway.http.edge import credential

COOKIE = "gateway_console"
SESSION_SALT = "gateway.console.session"
CSRF_HEADER = "x-console-csrf"
SESSION_MAX_AGE_S = 8 * 3600


@dataclass(frozen=True)
class Viewer:
    """A person (or program) looking at the console."""

    id: str
    role: str
    # The organizations whose tasks they see; None: every one (the control plane).
    org_ids: frozenset[str] | None
    # "bearer", "session" or "host": how they came in.
    via: str
    # What an answer's anti-forgery token is bound to (the session's own nonce).
    session: str = ""

    def sees(self, org_id: str) -> bool:
        return self.org_ids is None or org_id in self.org_ids


HostCheck = Callable[[Request], Awaitable[Viewer | None]]


@dataclass(frozen=True)
class HostSignIn:
    """The host's sign-in for the console: `check` returns the person a request comes from
    (None: nobody signed in), and `sign_in_url` is where to send someone who is not."""

    check: HostCheck
    sign_in_url: str | None = None


def host_viewer(
    person_id: str, role: str, org_ids: frozenset[str] | set[str], session: str = ""
) -> Viewer:
    """A person the host signed in, seeing only the tasks of `org_ids`."""
    return Viewer(person_id, role, frozenset(org_ids), "host", session or person_id)


CONTROL_PARTY = ("control-plane", "control")


@dataclass
class ConsoleAccess:
    control_key: Callable[[], str | None]
    secret_keys: Callable[[], list[str]]
    host: Callable[[], HostSignIn | None]

    def _serializer(self) -> URLSafeTimedSerializer:
        # itsdangerous signs with the last key and tries them all; the gateway's list is
        # newest first.
        return URLSafeTimedSerializer(list(reversed(self.secret_keys())), salt=SESSION_SALT)

    def _key_digest(self) -> str:
        key = self.control_key() or ""
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def is_control_key(self, presented: str) -> bool:
        expected = self.control_key() or ""
        return bool(expected) and hmac.compare_digest(presented.encode(), expected.encode())

    def new_session(self) -> str:
        """A cookie value for someone who just presented the control key."""
        return self._serializer().dumps({"k": self._key_digest(), "n": secrets.token_hex(16)})

    def _session_viewer(self, value: str) -> Viewer | None:
        try:
            payload = self._serializer().loads(value, max_age=SESSION_MAX_AGE_S)
        except BadSignature:
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("n"), str):
            return None
        if not hmac.compare_digest(str(payload.get("k", "")), self._key_digest()):
            return None
        party, role = CONTROL_PARTY
        return Viewer(party, role, None, "session", payload["n"])

    async def viewer(self, request: Request) -> Viewer:
        presented = credential(request)
        if presented:
            if self.is_control_key(presented):
                party, role = CONTROL_PARTY
                return Viewer(party, role, None, "bearer")
            raise AuthError("the console takes the control key or a console session")
        cookie = request.cookies.get(COOKIE)
        if cookie:
            found = self._session_viewer(cookie)
            if found is not None:
                return found
        host = self.host()
        if host is not None:
            person = await host.check(request)
            if person is not None:
                return person
        raise AuthError("sign in to the console first")

    def csrf_token(self, viewer: Viewer) -> str:
        key = (self.secret_keys() or [""])[0].encode()
        return hmac.new(
            key, f"console-csrf|{viewer.via}|{viewer.session}".encode(), "sha256"
        ).hexdigest()

    def check_answer(self, request: Request, viewer: Viewer) -> None:
        """A change made through a cookie carries the page's token: a page on another site
        can make the browser send the cookie, not read the token."""
        if viewer.via == "bearer":
            return
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), self.csrf_token(viewer).encode()):
            raise Forbidden("the answer does not carry this console page's token")
