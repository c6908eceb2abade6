"""Approvals in the console: one approval's own page (where a URL-mode elicitation links),
and the control plane's answer, given by the person signed in."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.console import pages
from gateway.console.access import Viewer
from gateway.console.guard import Guard
from gateway.console.links import BASE
from gateway.core.approvals.broker import Decision
from gateway.core.errors import Forbidden, NotFound
from gateway.http.approvals import DECIDE
from gateway.http.edge import parse_body, read_json


class ConsoleAnswer(BaseModel):
    """The body of an answer given in the console: the approver is who is signed in."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    scope: Literal["call", "task"] = "call"
    message: Annotated[str, StringConstraints(max_length=1000)] | None = None


def routes(guard: Guard) -> list[BaseRoute]:
    gw, access, base = guard.gw, guard.access, BASE

    async def answer(request: Request, viewer: Viewer) -> Response:
        """The control plane's answer, given by the person signed in, through the same
        broker call (and, on a cluster, the same errand to the task's owner) as
        `POST /v1/tasks/{id}/approvals/{approval_id}`: one answer, the first, counts."""
        access.check_answer(request, viewer)
        record = await guard.visible_task(viewer, request.path_params["task_id"])
        body = await read_json(request, gw.settings.max_body_bytes)
        given = parse_body(ConsoleAnswer, body, "the answer is invalid")
        approval_id = request.path_params["approval_id"]
        if viewer.via == "host" and viewer.id == record.identity.actor.id:
            # The console answers as the control plane: the task's own user, signed in
            # through the host, would settle what the policy keeps from them (a need
            # `by: control`, a grant for the task). They answer in their tab.
            raise Forbidden(
                "the task's own user answers its approvals in the dashboard tab, not here"
            )
        if gw.placement is not None:
            errand = {
                "approval_id": approval_id,
                "answer": {
                    **given.model_dump(),
                    "approver": {"id": viewer.id, "role": viewer.role},
                },
            }
            decided = await gw.placement.at_owner(record.identity.task_id, DECIDE, errand)
            if decided is not None:
                return JSONResponse(decided)
        done = await gw.approvals.decide(
            record.identity,
            approval_id,
            Decision(given.decision, given.scope, viewer.id, viewer.role, "control", given.message),
        )
        return JSONResponse(done.public())

    async def approval_page(request: Request, viewer: Viewer) -> Response:
        """One approval, by its id alone: the page a URL-mode elicitation links to. Seen by
        whoever may see its task (another organization's is 404), answered through the
        same route, broker and one-answer rule as the task page's cards."""
        approval_id = request.path_params["approval_id"]
        task_id = await gw.store.approval_task(approval_id)
        if task_id is None:
            raise NotFound("no such approval")
        record = await guard.visible_task(viewer, task_id)
        found = [
            a for a in await gw.approvals.listing(task_id) if a.get("approval_id") == approval_id
        ]
        if not found:
            raise NotFound("no such approval")
        html = pages.approval_page(
            found[0], record.identity.task_id, viewer=viewer.id, csrf=access.csrf_token(viewer)
        )
        return HTMLResponse(html)

    return [
        Route(f"{base}/approvals/{{approval_id}}", guard.page(approval_page), methods=["GET"]),
        Route(
            f"{base}/api/tasks/{{task_id}}/approvals/{{approval_id}}",
            guard.api(answer),
            methods=["POST"],
        ),
    ]
