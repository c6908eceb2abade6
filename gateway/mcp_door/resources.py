"""A task's artifacts as MCP resources: listed and read by URI, for that task only.

`gateway://artifacts/{artifact_id}` names one artifact (a screenshot, a bridge transcript,
a trace). `resources/list` pages through the calling task's own, oldest first; reading one
of another task, or one over the size bound, is an error the client sees as such. Text
(`text/*`, JSON) is returned as text, anything else as base64.
"""

from __future__ import annotations

import base64

import mcp_types as types

from gateway.core.errors import GatewayError, NotFound
from gateway.core.identity import TaskIdentity
from gateway.core.store.artifacts import ArtifactRef
from gateway.core.store.database import Store

URI_PREFIX = "gateway://artifacts/"
PAGE = 100
MAX_READ_BYTES = 16 * 1024 * 1024


def uri_of(ref: ArtifactRef) -> str:
    return URI_PREFIX + ref.id


def _resource(ref: ArtifactRef) -> types.Resource:
    return types.Resource(
        uri=uri_of(ref),
        name=ref.name,
        description=f"{ref.name}: an artifact of this task ({ref.size} bytes, sha256 {ref.sha256})",
        mime_type=ref.media_type,
        size=ref.size,
    )


class ArtifactResources:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def list(self, identity: TaskIdentity, cursor: str | None) -> types.ListResourcesResult:
        offset = int(cursor) if cursor and cursor.isdigit() and len(cursor) < 10 else 0
        refs = await self.store.artifacts_of(
            identity.org_id, identity.task_id, offset=offset, limit=PAGE + 1
        )
        more = len(refs) > PAGE
        return types.ListResourcesResult(
            resources=[_resource(ref) for ref in refs[:PAGE]],
            next_cursor=str(offset + PAGE) if more else None,
        )

    async def read(self, identity: TaskIdentity, uri: str) -> types.ReadResourceResult:
        if not uri.startswith(URI_PREFIX):
            raise NotFound(f"no resource {uri[:200]!r}: artifacts are {URI_PREFIX}<id>")
        try:
            ref = await self.store.get_artifact(uri.removeprefix(URI_PREFIX)[:64])
        except GatewayError:
            ref = None
        # Another task's artifact and a missing one read the same.
        if ref is None or ref.task_id != identity.task_id or ref.org_id != identity.org_id:
            raise NotFound(f"no resource {uri[:200]!r}")
        if ref.size > MAX_READ_BYTES:
            raise NotFound(f"{uri} is {ref.size} bytes; fetch it from /v1/artifacts/{ref.id}")
        data = await self.store.read_artifact(ref)
        textual = ref.media_type.startswith("text/") or ref.media_type == "application/json"
        contents: types.TextResourceContents | types.BlobResourceContents
        if textual:
            contents = types.TextResourceContents(
                uri=uri, mime_type=ref.media_type, text=data.decode("utf-8", "replace")
            )
        else:
            contents = types.BlobResourceContents(
                uri=uri, mime_type=ref.media_type, blob=base64.b64encode(data).decode("ascii")
            )
        return types.ReadResourceResult(contents=[contents])
