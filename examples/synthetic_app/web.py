"""The example dashboard as a Starlette app: pages, forms, a small JSON API, static files.

`SyntheticApp` is one instance of the app (its own data file, cookie and secret). The
gateway's `serve` runs two: the dashboard the user signs in to (with the assistant panel and
the control plane), and the sandbox instance a task's browser is assigned to.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from examples.synthetic_app import pages
from examples.synthetic_app.control import ControlPlane, ControlPlaneError
from examples.synthetic_app.directory import USERS
from examples.synthetic_app.errors import Forbidden, InvalidInput, NotFound
from examples.synthetic_app.models import DraftFields, RunBudget, RunRequest
from examples.synthetic_app.runs import RunEngine
from examples.synthetic_app.session import Sessions, SignedIn, same_origin
from examples.synthetic_app.store import AppStore, Who, who
from gateway.core.errors import AuthError, GatewayError

STATIC = Path(__file__).parent / "static"
TAB_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_FORM_BYTES = 64 * 1024


@dataclass
class AppConfig:
    instance: str  # "dashboard" (with the assistant) or "sandbox"
    data_path: Path
    secret: str
    # The dashboard's link to the gateway (None for the sandbox instance: no assistant).
    control: ControlPlane | None = None
    step_s: float = 0.4


class SyntheticApp:
    """One instance of the example app: its store, its run engine, its web front."""

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        self.store = AppStore(config.data_path)
        self.engine = RunEngine(self.store, step_s=config.step_s)
        self.sessions = Sessions(config.secret, cookie_name=f"{config.instance}_session")
        self.control = config.control
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.store.start()
            await self.engine.start()
            self._started = True

    async def stop(self) -> None:
        if self._started:
            await self.engine.stop()
            if self.control is not None:
                await self.control.close()
            await self.store.close()
            self._started = False

    async def start_run(self, w: Who, request: RunRequest) -> dict[str, Any]:
        """Queue a run and hand it to the engine; the answer says `queued`, never a verdict."""
        run = await self.store.create_run(w, request)
        self.engine.submit(run["run_id"])
        return run

    def chrome(self, signed: SignedIn | None) -> pages.Chrome:
        return pages.Chrome(
            self.config.instance,
            signed.user if signed else None,
            self.control.gateway_url if self.control is not None else None,
        )

    def asgi(self) -> Starlette:
        return build_web(self)


def _csp(gateway_url: str | None) -> str:
    script, connect = "'self'", "'self'"
    if gateway_url:
        parts = urlsplit(gateway_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        ws = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}"
        script, connect = f"'self' {origin}", f"'self' {origin} {ws}"
    return (
        f"default-src 'self'; script-src {script}; connect-src {connect}; "
        "style-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


Page = Callable[[Request, SignedIn], Awaitable[Response]]


def build_web(app: SyntheticApp) -> Starlette:
    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(
            body,
            status_code=status,
            headers={
                "Content-Security-Policy": _csp(
                    app.control.gateway_url if app.control is not None else None
                ),
                "X-Content-Type-Options": "nosniff",
                # Not no-referrer: with it Chromium sends `Origin: null` on form posts.
                "Referrer-Policy": "same-origin",
                "Cache-Control": "no-store",
            },
        )

    def page(handler: Page) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            signed = app.sessions.read(request)
            if signed is None:
                if request.url.path.startswith("/api/"):
                    raise AuthError("sign in first")
                return RedirectResponse("/signin", status_code=303)
            if request.method != "GET" and not same_origin(request):
                raise Forbidden("cross-origin requests are refused")
            return await handler(request, signed)

        return endpoint

    def acting(signed: SignedIn) -> Who:
        return who(signed.user.org_id, signed.user.id)

    async def form(request: Request) -> dict[str, list[str]]:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise InvalidInput("the form is too large")
        return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)

    async def form_json(request: Request) -> dict[str, Any]:
        """An optional small JSON object body (empty body: `{}`)."""
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > 4096:
                raise InvalidInput("the request body is too large")
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            raise InvalidInput("the body must be JSON") from None
        if not isinstance(value, dict):
            raise InvalidInput("the body must be a JSON object")
        return value

    def first(data: dict[str, list[str]], key: str) -> str | None:
        values = data.get(key)
        return values[0] if values else None

    # -- sign-in ------------------------------------------------------------------------

    async def index(request: Request) -> Response:
        target = "/agents" if app.sessions.read(request) else "/signin"
        return RedirectResponse(target, status_code=303)

    async def signin_form(request: Request) -> Response:
        return html(pages.signin_page(app.chrome(None)))

    async def signin(request: Request) -> Response:
        if not same_origin(request):
            raise Forbidden("cross-origin requests are refused")
        user = USERS.get(first(await form(request), "user_id") or "")
        if user is None:
            return html(pages.signin_page(app.chrome(None), "No such user."), 400)
        response = RedirectResponse("/agents", status_code=303)
        previous = app.sessions.read(request)
        if previous is not None and app.control is not None:
            await app.control.end_session(previous.session_id)
        app.sessions.sign_in(response, user)
        return response

    async def signout(request: Request, signed: SignedIn) -> Response:
        if app.control is not None:
            await app.control.end_session(signed.session_id)
        response = RedirectResponse("/signin", status_code=303)
        app.sessions.sign_out(response)
        return response

    # -- agents -------------------------------------------------------------------------

    async def agents(request: Request, signed: SignedIn) -> Response:
        found = await app.store.list_agents(acting(signed))
        return html(pages.agents_page(app.chrome(signed), found))

    async def builder(request: Request, signed: SignedIn) -> Response:
        agent_id = request.path_params.get("agent_id")
        agent = await app.store.get_agent(acting(signed), agent_id) if agent_id else None
        return html(
            pages.builder_page(app.chrome(signed), agent, can_save=signed.user.role == "admin")
        )

    async def write_draft(request: Request, signed: SignedIn) -> Response:
        data = await form(request)
        try:
            fields = DraftFields(
                name=first(data, "name") or None,
                instructions=first(data, "instructions") or "",
                model=first(data, "model"),
                tools=data.get("tools", []),
            )
        except ValidationError as exc:
            raise InvalidInput(f"the draft is invalid: {exc.error_count()} errors") from None
        result = await app.store.write_draft(
            acting(signed), request.path_params.get("agent_id"), fields
        )
        return RedirectResponse(f"/agents/{result['agent_id']}", status_code=303)

    async def save_version(request: Request, signed: SignedIn) -> Response:
        agent_id = request.path_params["agent_id"]
        await app.store.save_draft(acting(signed), agent_id)
        return RedirectResponse(f"/agents/{agent_id}", status_code=303)

    # -- suites and runs -----------------------------------------------------------------

    async def suites(request: Request, signed: SignedIn) -> Response:
        found = await app.store.list_suites(acting(signed))
        return html(pages.suites_page(app.chrome(signed), found))

    async def suite(request: Request, signed: SignedIn) -> Response:
        w = acting(signed)
        found = await app.store.get_suite(w, request.path_params["suite_id"])
        return html(pages.suite_page(app.chrome(signed), found, await app.store.list_agents(w)))

    async def start_run(request: Request, signed: SignedIn) -> Response:
        data = await form(request)
        try:
            run_request = RunRequest(
                agent_id=first(data, "agent_id") or "",
                suite_id=request.path_params["suite_id"],
                scenario_ids=data.get("scenario_ids") or None,
                budget=RunBudget(max_tokens=int(first(data, "max_tokens") or 2000)),
            )
        except (ValidationError, ValueError):
            raise InvalidInput("the run request is invalid") from None
        run = await app.start_run(acting(signed), run_request)
        return RedirectResponse(f"/runs/{run['run_id']}", status_code=303)

    async def runs(request: Request, signed: SignedIn) -> Response:
        return html(pages.runs_page(app.chrome(signed), await app.store.list_runs(acting(signed))))

    async def run(request: Request, signed: SignedIn) -> Response:
        found = await app.store.get_run(acting(signed), request.path_params["run_id"])
        return html(pages.run_page(app.chrome(signed), found))

    async def report(request: Request, signed: SignedIn) -> Response:
        found = await app.store.get_report(acting(signed), request.path_params["run_id"])
        return html(pages.report_page(app.chrome(signed), found))

    # -- JSON API ---------------------------------------------------------------------

    async def api_run(request: Request, signed: SignedIn) -> Response:
        w = acting(signed)
        run_id = request.path_params["run_id"]
        seen = app.engine.generation
        found = await app.store.get_run(w, run_id)
        # Long-poll a little when asked to, so the panel's progress moves without hammering.
        try:
            wait = float(request.query_params.get("wait", "0") or 0)
        except ValueError:
            raise InvalidInput("wait must be a number of seconds") from None
        wait = min(max(wait, 0.0), 10.0) if math.isfinite(wait) else 0.0
        deadline = time.monotonic() + wait
        since = request.query_params.get("since")
        while wait and not found["terminal"] and _fingerprint(found) == since:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await app.engine.wait_changed(remaining, since=seen)
            seen = app.engine.generation
            found = await app.store.get_run(w, run_id)
        return JSONResponse({**found, "fingerprint": _fingerprint(found)})

    async def api_assistant(request: Request, signed: SignedIn) -> Response:
        """The tab token for this session's task: same-origin, behind the session cookie."""
        if app.control is None:
            raise NotFound("this instance has no assistant")
        body = await form_json(request)
        tab = body.get("tab", "main")
        if not isinstance(tab, str) or not TAB_KEY.match(tab):
            raise InvalidInput("tab must be 1 to 64 of [A-Za-z0-9_-]")
        try:
            task = await app.control.task_for(
                signed.session_id, signed.user, tab=tab, renew=body.get("renew") is True
            )
        except ControlPlaneError as exc:
            return JSONResponse(
                {"error": {"code": "unavailable", "message": str(exc), "retryable": True}},
                status_code=503,
            )
        return JSONResponse(
            {
                "task_id": task.task_id,
                "tab_token": task.tab_token,
                "gateway": app.control.gateway_url,
                "expires_at": task.expires_at,
            },
            headers={"Cache-Control": "no-store"},
        )

    # -- the admin's approvals -----------------------------------------------------------

    def admin_control(signed: SignedIn) -> ControlPlane:
        if app.control is None:
            raise NotFound("this instance has no assistant")
        if signed.user.role != "admin":
            raise Forbidden("only an admin decides approvals")
        return app.control

    async def approvals(request: Request, signed: SignedIn) -> Response:
        control = admin_control(signed)
        pending = await control.pending_approvals(signed.user.org_id)
        return html(pages.approvals_page(app.chrome(signed), pending))

    async def decide(request: Request, signed: SignedIn) -> Response:
        control = admin_control(signed)
        decision = first(await form(request), "decision")
        if decision not in ("approve", "deny"):
            raise InvalidInput("decision is approve or deny")
        try:
            await control.decide(
                signed.user.org_id,
                request.path_params["task_id"],
                request.path_params["approval_id"],
                decision,
                signed.user,
            )
        except ControlPlaneError as exc:
            raise InvalidInput(str(exc)) from None
        return RedirectResponse("/admin/approvals", status_code=303)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "instance": app.config.instance})

    async def on_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        if request.url.path.startswith("/api/"):
            return JSONResponse(exc.to_json(), status_code=exc.http_status)
        signed = app.sessions.read(request)
        body = pages.error_page(app.chrome(signed), exc.http_status, exc.message)
        return html(body, exc.http_status)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await app.start()
        try:
            yield
        finally:
            await app.stop()

    routes = [
        Route("/", index),
        Route("/healthz", healthz),
        Route("/favicon.ico", lambda _r: Response(status_code=204)),
        Route("/signin", signin_form, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", page(signout), methods=["POST"]),
        Route("/agents", page(agents)),
        Route("/agents/new", page(builder), methods=["GET"]),
        Route("/agents/new/draft", page(write_draft), methods=["POST"]),
        Route("/agents/{agent_id}", page(builder), methods=["GET"]),
        Route("/agents/{agent_id}/draft", page(write_draft), methods=["POST"]),
        Route("/agents/{agent_id}/save", page(save_version), methods=["POST"]),
        Route("/suites", page(suites)),
        Route("/suites/{suite_id}", page(suite)),
        Route("/suites/{suite_id}/runs", page(start_run), methods=["POST"]),
        Route("/runs", page(runs)),
        Route("/runs/{run_id}", page(run)),
        Route("/reports/{run_id}", page(report)),
        Route("/api/runs/{run_id}", page(api_run)),
        Route("/api/assistant/session", page(api_assistant), methods=["POST"]),
        Route("/admin/approvals", page(approvals), methods=["GET"]),
        Route("/admin/approvals/{task_id}/{approval_id}", page(decide), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    web = Starlette(routes=routes, lifespan=lifespan, exception_handlers={GatewayError: on_error})
    web.state.synthetic = app
    return web


def _fingerprint(run: dict[str, Any]) -> str:
    return f"{run['state']}:" + ",".join(str(s["state"]) for s in run["scenarios"])
