"""What every console route shares: who is looking, and what they may see.

Every route asks `ConsoleAccess` who is looking first, and shows only the tasks of the
organizations that person sees (another organization's task is 404, as if it did not
exist). A page comes with the headers that keep it to its own files and out of frames.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.console import pages, timeline
from gateway.console.access import ConsoleAccess, HostSignIn, Viewer
from gateway.console.links import BASE
from gateway.console.markup import e
from gateway.core.errors import AuthError, GatewayError, NotFound
from gateway.core.store.artifacts import ArtifactRef
from gateway.core.store.tasks import TaskRecord
from gateway.http.edge import error_response
from gateway.runtime import Gateway

# What the console's own pages may load: their own files, nothing from elsewhere.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

Handler = Callable[[Request], Awaitable[Response]]
ViewerHandler = Callable[[Request, Viewer], Awaitable[Response]]


def framed(response: Response) -> Response:
    """A page of the console, with the headers every page has."""
    response.headers["Content-Security-Policy"] = PAGE_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


class Guard:
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.access = ConsoleAccess(
            control_key=lambda: gw.settings.control_key,
            secret_keys=lambda: gw.settings.secret_keys,
            host=lambda: gw.services.find(HostSignIn),
        )

    def page(self, handler: ViewerHandler) -> Handler:
        """A page: someone not signed in is sent to the sign-in page; errors are HTML."""
        access, gw = self.access, self.gw

        async def run(request: Request) -> Response:
            try:
                viewer = await access.viewer(request)
            except AuthError:
                host = gw.services.find(HostSignIn)
                target = host.sign_in_url if host and host.sign_in_url else f"{BASE}/sign-in"
                return RedirectResponse(target, status_code=303)
            try:
                return framed(await handler(request, viewer))
            except GatewayError as exc:
                body = pages.layout(
                    "Error",
                    f'<h1>{exc.http_status}</h1><p class="error">{e(exc.message)}</p>',
                    viewer=viewer.id,
                    csrf=access.csrf_token(viewer),
                )
                return framed(HTMLResponse(body, status_code=exc.http_status))

        return run

    def api(self, handler: ViewerHandler) -> Handler:
        access = self.access

        async def run(request: Request) -> Response:
            try:
                viewer = await access.viewer(request)
                return await handler(request, viewer)
            except GatewayError as exc:
                return error_response(exc)

        return run

    async def visible_task(self, viewer: Viewer, task_id: str) -> TaskRecord:
        record = await self.gw.store.get_task(task_id)
        if record is None or not viewer.sees(record.identity.org_id):
            raise NotFound("no such task")
        return record

    async def task_artifact(self, viewer: Viewer, task_id: str, artifact_id: str) -> ArtifactRef:
        record = await self.visible_task(viewer, task_id)
        ref = await self.gw.store.get_artifact(artifact_id)
        if ref.task_id != task_id or ref.org_id != record.identity.org_id:
            raise NotFound("no such artifact")
        return ref

    async def recording_records(self, record: TaskRecord) -> list[dict[str, Any]]:
        """The task's records of its browser's recording (its traces and videos)."""
        identity = record.identity
        return await self.gw.store.evidence_of_kinds(
            identity.org_id, identity.task_id, timeline.RECORDING_KINDS
        )
