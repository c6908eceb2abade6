"""What the console hands out of a task: its artifacts, its browser's traces (and
Playwright's viewer for them) and videos (by byte range), and the export of the whole task
as one archive. Only a trace or video the gateway recorded is served as one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gateway.console import byte_range, export, timeline, trace_viewer
from gateway.console.access import Viewer
from gateway.console.guard import Guard
from gateway.console.links import BASE
from gateway.core.errors import GatewayError, NotFound
from gateway.core.store.artifacts import VIDEO_MEDIA_TYPE, ArtifactRef
from gateway.core.store.tasks import TaskRecord
from gateway.runtime import Gateway

# What a task's timeline lists of one kind of recording (its traces, its videos).
Recorded = Callable[[Iterable[Mapping[str, Any]]], list[Mapping[str, Any]]]


def routes(guard: Guard) -> list[BaseRoute]:
    gw, base = guard.gw, BASE

    async def artifact(request: Request, viewer: Viewer) -> Response:
        ref = await guard.task_artifact(
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

    async def recorded(
        request: Request, viewer: Viewer, kind: Recorded, media_type: str, what: str
    ) -> ArtifactRef:
        """The artifact the path names, if the gateway recorded it of the task's browser as
        a `what` of `media_type`: never another file of the task served as one (a download
        the agent's browser kept is the app's, or a hostile site's)."""
        task_id, artifact_id = request.path_params["task_id"], request.path_params["artifact_id"]
        ref = await guard.task_artifact(viewer, task_id, artifact_id)
        record = await guard.visible_task(viewer, task_id)
        listed = {entry["artifact_id"] for entry in kind(await guard.recording_records(record))}
        if ref.media_type != media_type or artifact_id not in listed:
            raise NotFound(f"no such {what}")
        return ref

    async def trace(request: Request, viewer: Viewer) -> Response:
        # It opens in the viewer, on the console's origin.
        ref = await recorded(request, viewer, timeline.traces, "application/zip", "trace")
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
        # It plays on the console's origin.
        ref = await recorded(request, viewer, timeline.videos, VIDEO_MEDIA_TYPE, "video")
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
        record = await guard.visible_task(viewer, request.path_params["task_id"])
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
        Route(
            f"{base}/tasks/{{task_id}}/artifacts/{{artifact_id}}",
            guard.api(artifact),
            methods=["GET"],
        ),
        Route(
            f"{base}/tasks/{{task_id}}/traces/{{artifact_id}}/trace.zip",
            guard.api(trace),
            methods=["GET"],
        ),
        Route(
            f"{base}/tasks/{{task_id}}/videos/{{artifact_id}}/video.webm",
            guard.api(video),
            methods=["GET"],
        ),
        Route(f"{base}/tasks/{{task_id}}/export.zip", guard.api(export_task), methods=["GET"]),
        Route(f"{base}/trace-viewer/{{path:path}}", guard.api(viewer_file), methods=["GET"]),
    ]


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
