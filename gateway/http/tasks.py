"""`/v1/tasks`: the control plane creates, inspects and ends tasks; agents read their own.
A task's approvals (`/v1/tasks/{id}/approvals`) are served with it."""

from __future__ import annotations

import inspect

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gateway.core.errors import NotFound
from gateway.core.store.artifacts import VIDEO_MEDIA_TYPE
from gateway.core.store.evidence import MAX_SEQ
from gateway.core.tasks.service import TaskCreate
from gateway.http import approvals
from gateway.http.edge import bearer, gateway_access, parse_body, query_int, read_json
from gateway.runtime import Gateway


def routes(gw: Gateway) -> list[BaseRoute]:
    access = gateway_access(gw)

    async def create(request: Request) -> Response:
        access.require_control(request)
        body = await read_json(request, gw.settings.max_body_bytes)
        spec = parse_body(TaskCreate, body, "the task request is invalid")
        identity, tokens = await gw.tasks.create(spec)
        answer = {
            "task_id": identity.task_id,
            "expires_at": identity.expires_at.isoformat(),
            "tokens": tokens,
        }
        for name, extra in gw.task_extras.items():
            answer[name] = extra(identity, tokens)
        return JSONResponse(answer, status_code=201)

    async def read(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        await access.task_reader(request, task_id)
        record = await gw.tasks.get(task_id)
        body = gw.tasks.describe(record)
        body["calls"] = await gw.store.call_counts(task_id)
        body["evidence"] = {
            "events": await gw.store.event_count(task_id),
            "dropped": gw.events.dropped(task_id),
            "quota": gw.events.quota,
        }
        body["grants"] = await gw.approvals.grants(task_id)
        body["approvals_pending"] = len(gw.approvals.pending(task_id))
        for name, probe in gw.task_probes.items():
            value = probe(task_id)
            if inspect.isawaitable(value):
                value = await value
            if value is None and name in body:
                continue
            if isinstance(body.get(name), dict) and isinstance(value, dict):
                # A part's state of a field the task already describes (`sandbox`: the
                # provisioned app's state and manifest) extends it.
                body[name] = {**body[name], **value}
            else:
                body[name] = value
        return JSONResponse(body)

    async def end(request: Request) -> Response:
        access.require_control(request)
        task_id = request.path_params["task_id"]
        changed = await gw.tasks.end(task_id)
        record = await gw.tasks.get(task_id)
        return JSONResponse(
            {"task_id": task_id, "status": gw.tasks.status_of(record), "changed": changed}
        )

    async def evidence(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        await access.task_reader(request, task_id)
        record = await gw.tasks.get(task_id)
        after = query_int(request, "after", 0, low=0, high=MAX_SEQ)
        limit = query_int(request, "limit", 500, low=1, high=5000)
        # Scoped by the task's own owner: the query cannot reach another organization.
        items = await gw.store.evidence_for(
            record.identity.org_id, task_id, after=after, limit=limit
        )
        return JSONResponse({"task_id": task_id, "records": items})

    async def artifact(request: Request) -> Response:
        # Who asks comes first: an artifact's existence is nobody else's business, and a
        # missing one and another task's answer alike.
        reader = None if access.is_control(bearer(request)) else await access.task_identity(request)
        ref = await gw.store.get_artifact(request.path_params["artifact_id"])
        if reader is not None and reader.task_id != ref.task_id:
            raise NotFound("no such artifact")
        if reader is not None and ref.media_type == VIDEO_MEDIA_TYPE:
            # A video of the task browser is for the people at the console: it shows
            # whatever the pages showed, which a task's own token is not to take away.
            raise NotFound("no such artifact")
        # Streamed: the gateway never holds a large artifact whole. A missing object is an
        # error answer here, before the first byte; a stream whose bytes turn out wrong is cut
        # short, which Content-Length lets any client notice.
        chunks = await gw.store.stream_artifact(ref)
        return StreamingResponse(
            chunks,
            media_type=ref.media_type,
            headers={
                "Content-Length": str(ref.size),
                "X-Content-SHA256": ref.sha256,
                "Content-Disposition": f'attachment; filename="{ref.id}"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    return [
        Route("/v1/tasks", create, methods=["POST"]),
        Route("/v1/tasks/{task_id}", read, methods=["GET"]),
        Route("/v1/tasks/{task_id}", end, methods=["DELETE"]),
        Route("/v1/tasks/{task_id}/evidence", evidence, methods=["GET"]),
        Route("/v1/artifacts/{artifact_id}", artifact, methods=["GET"]),
        *approvals.routes(gw),
    ]
