"""Signing in to the console with the control key, and out: a session cookie of it.

(Signing in through the host's own sign-in is `HostSignIn`'s, in `access.py`.)
"""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.console import pages
from gateway.console.access import COOKIE, SESSION_MAX_AGE_S, HostSignIn
from gateway.console.guard import Guard, framed
from gateway.console.links import BASE
from gateway.core.errors import AuthError, InvalidInput
from gateway.http.edge import read_body

SIGN_IN_BODY_MAX = 4096


def routes(guard: Guard) -> list[BaseRoute]:
    gw, access, base = guard.gw, guard.access, BASE

    async def sign_in_form(request: Request) -> Response:
        host = gw.services.find(HostSignIn)
        return framed(HTMLResponse(pages.sign_in_page(host_url=host.sign_in_url if host else None)))

    async def sign_in(request: Request) -> Response:
        form = await _form(request)
        if not access.is_control_key(form.get("key", "")):
            gw.metrics.auth_failures.labels(purpose="console", code="invalid_token").inc()
            return framed(HTMLResponse(pages.sign_in_page("That is not the control key."), 401))
        response = RedirectResponse(base, status_code=303)
        response.set_cookie(
            COOKIE,
            access.new_session(),
            max_age=SESSION_MAX_AGE_S,
            path=base,
            httponly=True,
            samesite="strict",
            secure=gw.settings.base_url.startswith("https://"),
        )
        return response

    async def sign_out(request: Request) -> Response:
        response = RedirectResponse(f"{base}/sign-in", status_code=303)
        try:
            viewer = await access.viewer(request)
        except AuthError:
            return response
        form = await _form(request)
        if form.get("csrf") == access.csrf_token(viewer):
            response.delete_cookie(COOKIE, path=base)
        return response

    return [
        Route(f"{base}/sign-in", sign_in_form, methods=["GET"]),
        Route(f"{base}/sign-in", sign_in, methods=["POST"]),
        Route(f"{base}/sign-out", sign_out, methods=["POST"]),
    ]


async def _form(request: Request) -> dict[str, str]:
    """A small url-encoded form (the sign-in page's), bounded before it is read whole."""
    body = await read_body(request, SIGN_IN_BODY_MAX, "the form")
    try:
        parsed = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:
        raise InvalidInput("the form has more fields than the sign-in page sends") from None
    return {name: values[0] for name, values in parsed.items() if values}
