"""The dashboard's sign-in session: a signed, HttpOnly, SameSite=Strict cookie.

The cookie holds only a random session id and the user id, signed with itsdangerous
(timestamped, so an old cookie stops working). Unsafe requests must also come from the
page's own origin: with SameSite=Strict that is two independent guards against forgery.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from examples.synthetic_app.directory import USERS, User

SESSION_MAX_AGE_S = 8 * 3600


@dataclass(frozen=True)
class SignedIn:
    session_id: str
    user: User


class Sessions:
    def __init__(self, secret: str, *, cookie_name: str, secure: bool = False) -> None:
        # One cookie name per app instance: cookies are not isolated by port, and the
        # dashboard and its sandbox instance share a host.
        self.cookie_name = cookie_name
        self.secure = secure
        self._serializer = URLSafeTimedSerializer(secret, salt="synthetic-app-session")

    def read(self, request: Request) -> SignedIn | None:
        raw = request.cookies.get(self.cookie_name)
        if not raw:
            return None
        try:
            data = self._serializer.loads(raw, max_age=SESSION_MAX_AGE_S)
        except BadSignature:
            return None
        if not isinstance(data, dict):
            return None
        user = USERS.get(str(data.get("uid")))
        sid = data.get("sid")
        if user is None or not isinstance(sid, str):
            return None
        return SignedIn(sid, user)

    def sign_in(self, response: Response, user: User) -> SignedIn:
        signed = SignedIn(secrets.token_urlsafe(18), user)
        response.set_cookie(
            self.cookie_name,
            self._serializer.dumps({"sid": signed.session_id, "uid": user.id}),
            max_age=SESSION_MAX_AGE_S,
            httponly=True,
            samesite="strict",
            secure=self.secure,
            path="/",
        )
        return signed

    def sign_out(self, response: Response) -> None:
        response.delete_cookie(
            self.cookie_name, path="/", httponly=True, samesite="strict", secure=self.secure
        )


def same_origin(request: Request) -> bool:
    """Whether an unsafe request comes from this app's own pages.

    Browsers send `Origin` on every cross-origin request and on same-origin POSTs; a
    request without it (a non-browser client) is accepted only when `Sec-Fetch-Site`
    does not say it came from elsewhere.
    """
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
