"""Links instead of blobs: every artifact a result names, as an MCP resource link.

A tool's output names its artifacts by their public form (`artifact_id`, `name`,
`media_type`, `size`, `sha256`: a screenshot, a trace, a download, a bridge transcript).
Each becomes a `resource_link` block to `gateway://artifacts/{id}`, which the same agent
token reads by `resources/read` (or `GET /v1/artifacts/{id}`); the bytes stay in the
artifact store until a client asks for them. Only a screenshot also comes inline, scaled
to what a model takes (`gateway.mcp_door.images`).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from gateway.core.results import ToolResult
from gateway.mcp_door.resources import URI_PREFIX

MAX_LINKS = 16
MAX_DEPTH = 4


def named_artifacts(value: Any, depth: int = 0) -> list[dict[str, Any]]:
    """The artifacts an output names, in the order it names them, each once."""
    if depth > MAX_DEPTH:
        return []
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        artifact_id = value.get("artifact_id")
        if isinstance(artifact_id, str) and isinstance(value.get("media_type"), str):
            found.append(value)
        for item in value.values():
            found += named_artifacts(item, depth + 1)
    elif isinstance(value, list):
        for item in value[: MAX_LINKS * 4]:
            found += named_artifacts(item, depth + 1)
    return found


def resource_links(result: ToolResult) -> list[types.ResourceLink]:
    links: list[types.ResourceLink] = []
    seen: set[str] = set()
    for artifact in named_artifacts(result.output):
        artifact_id = str(artifact["artifact_id"])
        if artifact_id in seen:
            continue
        seen.add(artifact_id)
        size = artifact.get("size")
        links.append(
            types.ResourceLink(
                uri=URI_PREFIX + artifact_id,
                name=str(artifact.get("name") or artifact_id),
                mime_type=str(artifact["media_type"]),
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                description="an artifact of this task, read with resources/read",
            )
        )
        if len(links) == MAX_LINKS:
            break
    return links
