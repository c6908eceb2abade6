"""The console's routes under `/console`: pages, their live data, answers to approvals,
artifacts, the trace viewer and the export. Every route asks `ConsoleAccess` who is
looking first, and shows only the tasks of the organizations that person sees (another
organization's task is 404, as if it did not exist)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, quote

from pydantic import BaseModel, ConfigDict, StringConstraints
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Route

from gateway.console import byte_range, export, pages, timeline, trace_viewer
from gateway.console.access import COOKIE, SESSION_MAX_AGE_S, ConsoleAccess, HostSignIn, Viewer
from gateway.core.approvals.broker import Decision
from gateway.core.errors import (
    AuthError,
    Forbidden,
    GatewayError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)
from gateway.core.store.artifacts import VIDEO_MEDIA_TYPE, ArtifactRef
from gateway.core.store.tasks import TaskRecord
from gateway.http.approvals import DECIDE
from gateway.http.edge import error_response, parse_body, query_int, read_json
from gateway.runtime import Gateway

# A page of a task's timeline shows this many records; older and newer pages the rest.
PAGE_RECORDS = 5000
LIVE_RECORDS = 500
SIGN_IN_BODY_MAX = 4096
# Evidence sequence numbers fit SQLite's and PostgreSQL's 64-bit integers.
MAX_SEQ = 2**63 - 1
# What the console's own pages may load: their own files, nothing from elsewhere.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}


@dataclass(frozen=True)
class Window:
    """One page of a task's timeline, and the cursors of the pages around it."""

    records: list[dict[str, Any]]
    after: int
    # `?before=` of the older page, `?after=` of the newer one; None: there is none.
    older_before: int | None
    newer_after: int | None

    @property
    def whole(self) -> bool:
        return self.older_before is None and self.newer_after is None


class ConsoleAnswer(BaseModel):
    """The body of an answer given in the console: the approver is who is signed in."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    scope: Literal["call", "task"] = "call"
    message: Annotated[str, StringConstraints(max_length=1000)] | None = None


Handler = Callable[[Request], Awaitable[Response]]


def _page(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = PAGE_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def routes(gw: Gateway) -> list[BaseRoute]:
    access = ConsoleAccess(
        control_key=lambda: gw.settings.control_key,
        secret_keys=lambda: gw.settings.secret_keys,
        host=lambda: gw.services.find(HostSignIn),
    )
    base = pages.BASE

    def page(handler: Callable[[Request, Viewer], Awaitable[Response]]) -> Handler:
        """A page: someone not signed in is sent to the sign-in page; errors are HTML."""

        async def run(request: Request) -> Response:
            try:
                viewer = await access.viewer(request)
            except AuthError:
                host = gw.services.find(HostSignIn)
                target = host.sign_in_url if host and host.sign_in_url else f"{base}/sign-in"
                return RedirectResponse(target, status_code=303)
            try:
                return _page(await handler(request, viewer))
            except GatewayError as exc:
                body = pages.layout(
                    "Error",
                    f'<h1>{exc.http_status}</h1><p class="error">{pages.e(exc.message)}</p>',
                    viewer=viewer.id,
                    csrf=access.csrf_token(viewer),
                )
                return _page(HTMLResponse(body, status_code=exc.http_status))

        return run

    def api(handler: Callable[[Request, Viewer], Awaitable[Response]]) -> Handler:
        async def run(request: Request) -> Response:
            try:
                viewer = await access.viewer(request)
                return await handler(request, viewer)
            except GatewayError as exc:
                return error_response(exc)

        return run

    async def visible_task(viewer: Viewer, task_id: str) -> TaskRecord:
        record = await gw.store.get_task(task_id)
        if record is None or not viewer.sees(record.identity.org_id):
            raise NotFound("no such task")
        return record

    async def task_artifact(viewer: Viewer, task_id: str, artifact_id: str) -> ArtifactRef:
        record = await visible_task(viewer, task_id)
        ref = await gw.store.get_artifact(artifact_id)
        if ref.task_id != task_id or ref.org_id != record.identity.org_id:
            raise NotFound("no such artifact")
        return ref

    # -- signing in -------------------------------------------------------------------

    async def sign_in_form(request: Request) -> Response:
        host = gw.services.find(HostSignIn)
        return _page(HTMLResponse(pages.sign_in_page(host_url=host.sign_in_url if host else None)))

    async def sign_in(request: Request) -> Response:
        form = await _form(request)
        if not access.is_control_key(form.get("key", "")):
            gw.metrics.auth_failures.labels(purpose="console", code="invalid_token").inc()
            return _page(HTMLResponse(pages.sign_in_page("That is not the control key."), 401))
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

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        path = pages.STATIC / name
        if name not in {p.name for p in pages.STATIC.iterdir()} or path.suffix not in STATIC_TYPES:
            raise NotFound("no such file")
        return FileResponse(path, media_type=STATIC_TYPES[path.suffix])

    # -- the list of tasks ------------------------------------------------------------

    def filters_of(request: Request) -> dict[str, str | None]:
        params = request.query_params
        chosen: dict[str, str | None] = {}
        for name in ("org", "actor", "status", "door"):
            value = (params.get(name) or "").strip()
            if len(value) > 128:
                raise InvalidInput(f"the {name} filter is too long")
            chosen[name] = value or None
        if chosen["status"] not in (None, *pages.STATUSES):
            raise InvalidInput(f"status is one of {', '.join(pages.STATUSES)}")
        if chosen["door"] not in (None, *pages.DOORS):
            raise InvalidInput(f"door is one of {', '.join(pages.DOORS)}")
        return chosen

    async def listed(viewer: Viewer, filters: dict[str, str | None]) -> list[dict[str, Any]]:
        org_ids: list[str] | None
        if viewer.org_ids is None:
            org_ids = [filters["org"]] if filters["org"] else None
        else:
            wanted = {filters["org"]} if filters["org"] else viewer.org_ids
            org_ids = sorted(viewer.org_ids & wanted)
        records = await gw.store.task_rows(
            now=time.time(),
            org_ids=org_ids,
            actor_id=filters["actor"],
            status=filters["status"],
            door=filters["door"],
        )
        tallies = await gw.store.task_tallies([r.identity.task_id for r in records])
        out = []
        for record in records:
            identity = record.identity
            tally = tallies[identity.task_id]
            out.append(
                {
                    "task_id": identity.task_id,
                    "org_id": identity.org_id,
                    "actor": identity.actor.id,
                    "status": str(gw.tasks.status_of(record)),
                    "created_at": identity.created_at.timestamp(),
                    "doors": tally.pop("doors"),
                    "tally": tally,
                }
            )
        return out

    async def tasks_page(request: Request, viewer: Viewer) -> Response:
        filters = filters_of(request)
        found = await listed(viewer, filters)
        html = pages.tasks_page(found, filters, viewer=viewer.id, csrf=access.csrf_token(viewer))
        return HTMLResponse(html)

    async def tasks_json(request: Request, viewer: Viewer) -> Response:
        return JSONResponse({"tasks": await listed(viewer, filters_of(request))})

    # -- a task -----------------------------------------------------------------------

    async def gathered(record: TaskRecord, limit: int) -> tuple[list[dict[str, Any]], bool]:
        identity = record.identity
        records = await gw.store.evidence_for(
            identity.org_id, identity.task_id, after=0, limit=limit + 1
        )
        return records[:limit], len(records) > limit

    async def task_page(request: Request, viewer: Viewer) -> Response:
        """A page of the task's timeline: the `PAGE_RECORDS` records after `after` (the
        first ones by default), or the ones just before `before`, with links to the older
        and newer pages. Only its newest page follows the task live."""
        record = await visible_task(viewer, request.path_params["task_id"])
        identity = record.identity
        org_id, task_id = identity.org_id, identity.task_id
        window = await timeline_window(request, record)
        records = window.records
        # The metrics are of the task's first records on every page, as the live poll's.
        first = (
            records if window.older_before is None else (await gathered(record, PAGE_RECORDS))[0]
        )
        # The recording and the manifest are the task's, wherever their records fall.
        whole = records if window.whole else await recording_records(record)
        if window.newer_after is None:
            last_seq = records[-1]["seq"] if records else window.after
        else:
            # Not the newest page: the live poll brings counts and approvals, no entries.
            newest = await gw.store.evidence_for(org_id, task_id, before=MAX_SEQ, limit=1)
            last_seq = newest[-1]["seq"] if newest else 0
        start = timeline.entries(first[:1])
        html = pages.task_page(
            gw.tasks.describe(record),
            timeline.entries(records),
            metrics=timeline.call_metrics(first),
            approvals=await gw.approvals.listing(task_id),
            traces=timeline.traces(whole),
            manifest=timeline.manifest(whole),
            videos=timeline.videos(whole),
            last_seq=last_seq,
            viewer=viewer.id,
            csrf=access.csrf_token(viewer),
            origin=start[0].at if start else None,
            older_before=window.older_before,
            newer_after=window.newer_after,
        )
        return HTMLResponse(html)

    async def recording_records(record: TaskRecord) -> list[dict[str, Any]]:
        identity = record.identity
        return await gw.store.evidence_of_kinds(
            identity.org_id, identity.task_id, timeline.RECORDING_KINDS
        )

    async def timeline_window(request: Request, record: TaskRecord) -> Window:
        identity = record.identity
        org_id, task_id = identity.org_id, identity.task_id
        params = request.query_params
        if "after" in params and "before" in params:
            raise InvalidInput("a page of the timeline is asked for by after or before, not both")
        if "before" in params:
            before = query_int(request, "before", MAX_SEQ, low=1, high=MAX_SEQ)
            records = await gw.store.evidence_for(
                org_id, task_id, before=before, limit=PAGE_RECORDS
            )
            after = records[0]["seq"] - 1 if records else 0
        else:
            after = query_int(request, "after", 0, low=0, high=MAX_SEQ)
            records = await gw.store.evidence_for(org_id, task_id, after=after, limit=PAGE_RECORDS)
        low = records[0]["seq"] if records else after + 1
        older = await gw.store.evidence_for(org_id, task_id, before=low, limit=1)
        high = records[-1]["seq"] if records else after
        newer = await gw.store.evidence_for(org_id, task_id, after=high, limit=1)
        return Window(
            records,
            after=after,
            older_before=low if older else None,
            newer_after=high if newer and records else None,
        )

    async def task_live(request: Request, viewer: Viewer) -> Response:
        """What changed since `after`: new timeline entries (rendered), the counts, and
        every approval's state (a card for each pending one)."""
        record = await visible_task(viewer, request.path_params["task_id"])
        identity = record.identity
        after = query_int(request, "after", 0, low=0, high=MAX_SEQ)
        fresh = await gw.store.evidence_for(
            identity.org_id, identity.task_id, after=after, limit=LIVE_RECORDS
        )
        everything, _ = await gathered(record, PAGE_RECORDS)
        approvals = await gw.approvals.listing(identity.task_id)
        links = pages.console_links(identity.task_id)
        metrics = timeline.call_metrics(everything)
        pending = sum(1 for a in approvals if a.get("status") == "pending")
        first = timeline.entries(everything[:1])
        origin = first[0].at if first else None
        return JSONResponse(
            {
                "status": str(gw.tasks.status_of(record)),
                "last_seq": fresh[-1]["seq"] if fresh else after,
                "entries_html": pages.entries_html(timeline.entries(fresh), links, origin),
                "metrics": {
                    "calls": metrics["calls"],
                    "refused": metrics["refused"],
                    "shed": metrics["shed"],
                    "pending_approvals": pending,
                    "p50": pages.ms(metrics["p50_ms"]),
                    "p99": pages.ms(metrics["p99_ms"]),
                },
                "approvals": [
                    {
                        "approval_id": a["approval_id"],
                        "status": a["status"],
                        "html": pages.approval_card(a),
                    }
                    for a in approvals
                ],
            }
        )

    async def answer(request: Request, viewer: Viewer) -> Response:
        """The control plane's answer, given by the person signed in, through the same
        broker call (and, on a cluster, the same errand to the task's owner) as
        `POST /v1/tasks/{id}/approvals/{approval_id}`: one answer, the first, counts."""
        access.check_answer(request, viewer)
        record = await visible_task(viewer, request.path_params["task_id"])
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
        record = await visible_task(viewer, task_id)
        found = [
            a for a in await gw.approvals.listing(task_id) if a.get("approval_id") == approval_id
        ]
        if not found:
            raise NotFound("no such approval")
        html = pages.approval_page(
            found[0], record.identity.task_id, viewer=viewer.id, csrf=access.csrf_token(viewer)
        )
        return HTMLResponse(html)

    # -- artifacts, traces, the viewer, the export -------------------------------------

    async def artifact(request: Request, viewer: Viewer) -> Response:
        ref = await task_artifact(
            viewer, request.path_params["task_id"], request.path_params["artifact_id"]
        )
        inline = ref.media_type in ("image/png", "image/jpeg")
        return StreamingResponse(
            await gw.store.stream_artifact(ref),
            media_type=ref.media_type if inline else "application/octet-stream",
            headers={
                "Content-Length": str(ref.size),
                "X-Content-SHA256": ref.sha256,
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "sandbox; default-src 'none'",
                "Content-Disposition": (
                    "inline" if inline else f'attachment; filename="{quote(ref.name)}"'
                ),
            },
        )

    async def trace(request: Request, viewer: Viewer) -> Response:
        task_id, artifact_id = request.path_params["task_id"], request.path_params["artifact_id"]
        ref = await task_artifact(viewer, task_id, artifact_id)
        # Only a trace the gateway recorded of the task's browser opens in the viewer, on
        # the console's origin: never another zip of the task (a download the agent's
        # browser kept is the app's, or a hostile site's).
        record = await visible_task(viewer, task_id)
        recorded = {t["artifact_id"] for t in timeline.traces(await recording_records(record))}
        if ref.media_type != "application/zip" or artifact_id not in recorded:
            raise NotFound("no such trace")
        return StreamingResponse(
            await gw.store.stream_artifact(ref),
            media_type="application/zip",
            headers={
                "Content-Length": str(ref.size),
                "X-Content-SHA256": ref.sha256,
                "X-Content-Type-Options": "nosniff",
            },
        )

    async def video(request: Request, viewer: Viewer) -> Response:
        task_id, artifact_id = request.path_params["task_id"], request.path_params["artifact_id"]
        ref = await task_artifact(viewer, task_id, artifact_id)
        # Only a video the gateway recorded of the task's browser plays on the console's
        # origin: never another file of the task served as one.
        record = await visible_task(viewer, task_id)
        recorded = {v["artifact_id"] for v in timeline.videos(await recording_records(record))}
        if ref.media_type != VIDEO_MEDIA_TYPE or artifact_id not in recorded:
            raise NotFound("no such video")
        headers = {
            "X-Content-SHA256": ref.sha256,
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "Accept-Ranges": "bytes",
        }
        try:
            wanted = byte_range.parse(request.headers.get("range"), ref.size)
        except byte_range.Unsatisfiable:
            headers["Content-Range"] = f"bytes */{ref.size}"
            return Response(status_code=416, headers=headers)
        chunks = await gw.store.stream_artifact(ref)
        if wanted is None:
            headers["Content-Length"] = str(ref.size)
            return StreamingResponse(chunks, media_type=VIDEO_MEDIA_TYPE, headers=headers)
        start, end = wanted
        headers["Content-Length"] = str(end - start + 1)
        headers["Content-Range"] = f"bytes {start}-{end}/{ref.size}"
        return StreamingResponse(
            byte_range.sliced(chunks, start, end),
            status_code=206,
            media_type=VIDEO_MEDIA_TYPE,
            headers=headers,
        )

    async def viewer_file(request: Request, viewer: Viewer) -> Response:
        return trace_viewer.viewer_file(request.path_params.get("path", ""))

    async def export_task(request: Request, viewer: Viewer) -> Response:
        record = await visible_task(viewer, request.path_params["task_id"])
        identity = record.identity
        records = await _all_evidence(gw, record)
        refs = await _all_artifacts(gw, record)
        artifacts = []
        for ref in refs:
            try:
                data: bytes | None = await gw.store.read_artifact(ref)
            except GatewayError:
                data = None
            artifacts.append(export.Artifact(ref.id, ref.name, ref.media_type, data))
        entries = timeline.entries(records)
        archive = await asyncio.to_thread(
            export.build,
            gw.tasks.describe(record),
            records,
            entries,
            metrics=timeline.call_metrics(records),
            approvals=await gw.approvals.listing(identity.task_id),
            manifest=timeline.manifest(records),
            artifacts=artifacts,
        )
        return Response(
            archive,
            media_type="application/zip",
            headers={
                "Content-Disposition": f'attachment; filename="{identity.task_id}.zip"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    return [
        Route(base, page(tasks_page), methods=["GET"]),
        Route(f"{base}/", page(tasks_page), methods=["GET"]),
        Route(f"{base}/sign-in", sign_in_form, methods=["GET"]),
        Route(f"{base}/sign-in", sign_in, methods=["POST"]),
        Route(f"{base}/sign-out", sign_out, methods=["POST"]),
        Route(f"{base}/static/{{name}}", static, methods=["GET"]),
        Route(f"{base}/api/tasks", api(tasks_json), methods=["GET"]),
        Route(f"{base}/tasks/{{task_id}}", page(task_page), methods=["GET"]),
        Route(f"{base}/api/tasks/{{task_id}}/live", api(task_live), methods=["GET"]),
        Route(f"{base}/approvals/{{approval_id}}", page(approval_page), methods=["GET"]),
        Route(
            f"{base}/api/tasks/{{task_id}}/approvals/{{approval_id}}",
            api(answer),
            methods=["POST"],
        ),
        Route(
            f"{base}/tasks/{{task_id}}/artifacts/{{artifact_id}}", api(artifact), methods=["GET"]
        ),
        Route(
            f"{base}/tasks/{{task_id}}/traces/{{artifact_id}}/trace.zip",
            api(trace),
            methods=["GET"],
        ),
        Route(
            f"{base}/tasks/{{task_id}}/videos/{{artifact_id}}/video.webm",
            api(video),
            methods=["GET"],
        ),
        Route(f"{base}/tasks/{{task_id}}/export.zip", api(export_task), methods=["GET"]),
        Route(f"{base}/trace-viewer/{{path:path}}", api(viewer_file), methods=["GET"]),
    ]


async def _form(request: Request) -> dict[str, str]:
    """A small url-encoded form (the sign-in page's), bounded before it is read whole."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > SIGN_IN_BODY_MAX:
            raise PayloadTooLarge(f"the form is larger than {SIGN_IN_BODY_MAX} bytes")
        chunks.append(chunk)
    try:
        parsed = parse_qs(b"".join(chunks).decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:
        raise InvalidInput("the form has more fields than the sign-in page sends") from None
    return {name: values[0] for name, values in parsed.items() if values}


async def _all_evidence(gw: Gateway, record: TaskRecord) -> list[dict[str, Any]]:
    identity = record.identity
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        batch = await gw.store.evidence_for(
            identity.org_id, identity.task_id, after=after, limit=5000
        )
        out.extend(batch)
        if len(batch) < 5000:
            return out
        after = batch[-1]["seq"]


async def _all_artifacts(gw: Gateway, record: TaskRecord) -> list[ArtifactRef]:
    identity = record.identity
    out: list[ArtifactRef] = []
    while True:
        batch = await gw.store.artifacts_of(
            identity.org_id, identity.task_id, offset=len(out), limit=100
        )
        out.extend(batch)
        if len(batch) < 100:
            return out
