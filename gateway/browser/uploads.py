"""The files `browser.upload` hands a page: the task's own workspace files and artifacts.

A path is one of the workspace's (relative, walked without following a link, a regular
file: `gateway.workspace.paths`), never a path of the gateway's machine. An artifact is one
of the task's own (a download it kept, a screenshot): another task's or organization's id
is `not_found`, as one that does not exist, so an id says nothing about anyone else. The
files of one call are bounded together (`GATEWAY_BROWSER_UPLOAD_MAX_BYTES`), an artifact
by its recorded size before any byte of it is read. The bytes go to the page as a buffer,
so Chromium is never told a path either. Each file's size and sha256 go into the call's
evidence.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.errors import NotFound, ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.registry import ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from gateway.core.store.artifacts import ArtifactRef
from gateway.workspace.paths import Workspace, split_path
from gateway.workspace.tools import Workspaces

# What the store names an artifact (`gateway.core.ids.new_id("art")`).
ARTIFACT_ID_PATTERN = r"^art_[0-9a-f]{20}$"


@dataclass(frozen=True)
class Upload:
    name: str
    path: str
    data: bytes
    # Where it came from besides a workspace path: `{"artifact_id": ...}`.
    source: dict[str, str] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        media = mimetypes.guess_type(self.name)[0] or "application/octet-stream"
        return {"name": self.name, "mimeType": media, "buffer": self.data}

    def public(self) -> dict[str, Any]:
        return {
            **(self.source or {"path": self.path}),
            "size": len(self.data),
            "sha256": hashlib.sha256(self.data).hexdigest(),
        }


def _too_large(total: int, limit: int) -> ToolFailure:
    return ToolFailure(
        ToolStatus.DENIED,
        ErrorCode.QUOTA_EXCEEDED,
        f"the files come to more than {limit} bytes, the bound of one upload",
        details={"quota": "upload_bytes", "limit": limit, "current": 0, "adding": total},
    )


def _read(ws: Workspace, path: str, room: int, limit: int) -> Upload:
    parts = split_path(path)
    display = "/".join(parts)
    with ws.directory(parts[:-1]) as dir_fd:
        fd = Workspace.open_file(dir_fd, parts[-1], os.O_RDONLY, display)
        try:
            size = os.fstat(fd).st_size
            if size > room:
                raise _too_large(limit - room + size, limit)
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(room + 1)
        finally:
            os.close(fd)
    if len(data) > room:  # it grew while being read
        raise _too_large(limit - room + len(data), limit)
    return Upload(parts[-1], display, data)


def workspace_files(
    identity: TaskIdentity, ctx: ToolContext, paths: list[str], limit: int
) -> list[Upload]:
    """The named files of the task's workspace, within `limit` bytes together."""
    workspaces = ctx.services.find(Workspaces)
    if workspaces is None:
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.UNSUPPORTED,
            "this gateway gives tasks no workspace, so there is no file to upload",
        )
    ws = workspaces.for_task(identity)
    files: list[Upload] = []
    room = limit
    for path in paths:
        upload = _read(ws, path, room, limit)
        room -= len(upload.data)
        files.append(upload)
    return files


async def artifact_files(
    identity: TaskIdentity,
    artifact_ids: list[str],
    room: int,
    limit: int,
    *,
    get: Callable[[str], Awaitable[ArtifactRef]],
    read: Callable[[ArtifactRef], Awaitable[bytes]],
) -> list[Upload]:
    """The named artifacts of the task itself, within `room` of the `limit` bytes."""
    files: list[Upload] = []
    for artifact_id in artifact_ids:
        ref = await get(artifact_id)
        if ref.task_id != identity.task_id or ref.org_id != identity.org_id:
            raise NotFound("no such artifact")
        if ref.size > room:
            raise _too_large(limit - room + ref.size, limit)
        data = await read(ref)  # checked against its sha256 on the way
        room -= len(data)
        files.append(Upload(ref.name, ref.name, data, {"artifact_id": ref.id, "name": ref.name}))
    return files
