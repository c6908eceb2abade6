"""The canonical workspace tools: `workspace.read`, `.search` (scope `workspace:read`),
`.write`, `.edit` (scope `workspace:write`, side effects: idempotent by key).

Each task has its own directory under the data dir (`workspaces/o_<org>/<task>`); a tool
only ever sees the calling task's directory, chosen from the task identity on the server,
never from the input. Each directory has a quota (`GATEWAY_WORKSPACE_MAX_BYTES`,
`GATEWAY_WORKSPACE_MAX_FILES`) that writes and edits are charged against.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.routing import BaseRoute

from gateway.core.identity import TaskIdentity
from gateway.core.registry import Registry, Tool, ToolAnnotations, ToolContext
from gateway.parts import WorkspaceConfig, workspace_config
from gateway.runtime import Gateway
from gateway.workspace import files
from gateway.workspace.paths import MAX_PATH_CHARS, Workspace, workspace_dir
from gateway.workspace.quota import Limits, Tally

READ_SCOPE = "workspace:read"
WRITE_SCOPE = "workspace:write"

WorkspacePath = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_CHARS)]


class Workspaces:
    """The service that maps a task identity to its workspace directory (and its quota)."""

    def __init__(self, config: WorkspaceConfig) -> None:
        self.data_dir = config.data_dir
        self.limits = Limits(config.max_bytes, config.max_files)
        # One tally per task with a workspace in use, so every call of a task is charged
        # against the same count; dropped when the task ends (no call can come after).
        self._tallies: dict[str, Tally] = {}

    def for_task(self, identity: TaskIdentity) -> Workspace:
        root = workspace_dir(self.data_dir, identity)
        tally = self._tallies.get(identity.task_id)
        if tally is None:
            tally = self._tallies[identity.task_id] = Tally(self.limits)
        return Workspace(root, tally)

    async def task_ended(self, task_id: str, _reason: str) -> None:
        self._tallies.pop(task_id, None)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadInput(_Input):
    path: WorkspacePath = Field(description="file path relative to the workspace")
    offset: int = Field(default=0, ge=0, description="byte offset to start reading at")
    limit: int = Field(default=files.READ_MAX_BYTES, ge=1, le=files.READ_MAX_BYTES)


class SearchInput(_Input):
    query: str = Field(min_length=1, max_length=256, description="literal text to find")
    path: WorkspacePath = Field(default=".", description="directory to search under")
    max_results: int = Field(default=100, ge=1, le=files.SEARCH_MAX_RESULTS)
    case_sensitive: bool = True


class WriteInput(_Input):
    path: WorkspacePath
    contents: str = Field(max_length=files.WRITE_MAX_BYTES)
    create_dirs: bool = True


class EditInput(_Input):
    path: WorkspacePath
    old: str = Field(min_length=1, max_length=64 * 1024, description="exact text to replace")
    new: str = Field(max_length=64 * 1024)
    replace_all: bool = False
    expected_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


def _ws(ctx: ToolContext) -> Workspace:
    return ctx.service(Workspaces).for_task(ctx.identity)


async def _read(ctx: ToolContext, args: ReadInput) -> dict[str, Any]:
    return await asyncio.to_thread(files.read, _ws(ctx), args.path, args.offset, args.limit)


async def _search(ctx: ToolContext, args: SearchInput) -> dict[str, Any]:
    return await asyncio.to_thread(
        files.search, _ws(ctx), args.query, args.path, args.max_results, args.case_sensitive
    )


async def _write(ctx: ToolContext, args: WriteInput) -> dict[str, Any]:
    return await asyncio.to_thread(
        files.write, _ws(ctx), args.path, args.contents, args.create_dirs
    )


async def _edit(ctx: ToolContext, args: EditInput) -> dict[str, Any]:
    return await asyncio.to_thread(
        files.edit,
        _ws(ctx),
        args.path,
        args.old,
        args.new,
        args.replace_all,
        args.expected_sha256,
    )


WORKSPACE_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="workspace.read",
        title="Read a workspace file",
        description="Read a UTF-8 file of the task's workspace (by byte range when large).",
        input_model=ReadInput,
        handler=_read,
        scopes=frozenset({READ_SCOPE}),
        annotations=ToolAnnotations(read_only_hint=True, untrusted_content_hint=True),
        max_output_bytes=2 * 1024 * 1024,
    ),
    Tool(
        name="workspace.search",
        title="Search the workspace",
        description="Find lines containing literal text in the task's workspace files.",
        input_model=SearchInput,
        handler=_search,
        scopes=frozenset({READ_SCOPE}),
        annotations=ToolAnnotations(read_only_hint=True, untrusted_content_hint=True),
        max_output_bytes=512 * 1024,
    ),
    Tool(
        name="workspace.write",
        title="Write a workspace file",
        description="Create or replace a file of the task's workspace (atomically).",
        input_model=WriteInput,
        handler=_write,
        scopes=frozenset({WRITE_SCOPE}),
        annotations=ToolAnnotations(consequential_hint=True),
        side_effects=True,
    ),
    Tool(
        name="workspace.edit",
        title="Edit a workspace file",
        description="Replace exact text in a file of the task's workspace.",
        input_model=EditInput,
        handler=_edit,
        scopes=frozenset({WRITE_SCOPE}),
        annotations=ToolAnnotations(consequential_hint=True),
        side_effects=True,
    ),
)


def register(registry: Registry) -> None:
    for tool in WORKSPACE_TOOLS:
        if registry.get(tool.name) is None:
            registry.add(tool)


def install(gw: Gateway) -> list[BaseRoute]:
    """The workspace extension: the service and the four tools; no routes of its own."""
    workspaces = Workspaces(workspace_config(gw.settings))
    gw.services.provide(Workspaces, workspaces)
    gw.tasks.on_end(workspaces.task_ended)
    register(gw.registry)
    return []
