"""The files `browser.upload` hands a page: read from the task's own workspace only.

A path is one of the workspace's (relative, walked without following a link, a regular
file: `gateway.workspace.paths`), never a path of the gateway's machine; the files of one
call are bounded together (`GATEWAY_BROWSER_UPLOAD_MAX_BYTES`). The bytes go to the page
as a buffer, so Chromium is never told a path either. Each file's size and sha256 go into
the call's evidence.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from dataclasses import dataclass
from typing import Any

from gateway.errors import ToolFailure
from gateway.identity import TaskIdentity
from gateway.registry import ToolContext
from gateway.results import ErrorCode, ToolStatus
from gateway.workspace.paths import Workspace, split_path
from gateway.workspace.tools import Workspaces


@dataclass(frozen=True)
class Upload:
    name: str
    path: str
    data: bytes

    def payload(self) -> dict[str, Any]:
        media = mimetypes.guess_type(self.name)[0] or "application/octet-stream"
        return {"name": self.name, "mimeType": media, "buffer": self.data}

    def public(self) -> dict[str, Any]:
        return {
            "path": self.path,
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
