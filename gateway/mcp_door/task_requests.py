"""The MCP task methods on the SDK's low-level server: who may start, read and cancel.

The SDK has the tasks' types but no tasks server, so the door adds one:
- `TaskCalls`, a server middleware, takes a `tools/call` that carries `params.task`
  before the SDK's `tools/call` handler would (whose answer must be a `CallToolResult`),
  starts the call as a task and answers its `CreateTaskResult`. Only a tool that can run
  long (`Tool.long_running`, listed with `execution.taskSupport: "optional"`) runs as a
  task; asking it of another is `-32601`, as the protocol says. A call without `task` is
  left to the handler, so a client that does not ask gets a direct answer;
- `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` are request handlers of
  their own, each answering for the identity of the HTTP request that carried it;
- `TaskServer` advertises the capability: `capabilities.tasks` (2025-11-25) and the
  `io.modelcontextprotocol/tasks` extension (2026-07-28).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.core.identity import TaskIdentity
from gateway.core.registry import Registry
from gateway.mcp_door.bearer import identity_of
from gateway.mcp_door.call_tasks import CallTasks

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
METHOD_NOT_FOUND = -32601

Context = ServerRequestContext[Any, Any]
# Runs one call for a task: the identity, the call's params, the event that stops it.
TaskRun = Callable[
    [TaskIdentity, types.CallToolRequestParams, asyncio.Event], Awaitable[types.CallToolResult]
]

TASKS_CAPABILITY = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(
        tools=types.TasksToolsCapability(call=types.TasksCallCapability())
    ),
)


class TaskServer(Server[Any]):
    """The SDK's server, advertising tasks when the door offers them."""

    tasks_offered = False

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if not self.tasks_offered:
            return capabilities
        return capabilities.model_copy(update={"tasks": TASKS_CAPABILITY})


class TaskCalls:
    """Server middleware: a `tools/call` that asks for a task becomes one."""

    def __init__(self, tasks: CallTasks, registry: Registry, run: TaskRun) -> None:
        self.tasks = tasks
        self.registry = registry
        self.run = run

    async def __call__(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if (
            ctx.method != "tools/call"
            or not isinstance(params, Mapping)
            or params.get("task") is None
        ):
            return await call_next(ctx)
        call = types.CallToolRequestParams.model_validate(params, by_name=False)
        tool = self.registry.get(call.name)
        if tool is None or not tool.long_running:
            raise MCPError(METHOD_NOT_FOUND, f"tool {call.name!r} does not run as a task")
        identity = identity_of(ctx.request)
        ttl = call.task.ttl if call.task is not None else None

        async def run(cancel: asyncio.Event) -> types.CallToolResult:
            return await self.run(identity, call, cancel)

        task = self.tasks.start(identity.task_id, tool.name, ttl, run)
        answer: dict[str, Any] = {
            "task": task.view().model_dump(by_alias=True, mode="json", exclude_none=True)
        }
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            answer["resultType"] = "complete"
        return answer


def install(server: TaskServer, tasks: CallTasks, registry: Registry, run: TaskRun) -> None:
    """Serve tasks on `server` (after its middleware list is set)."""
    if not tasks.enabled:
        return
    server.tasks_offered = True
    server.extensions[TASKS_EXTENSION] = {}
    server.middleware.append(TaskCalls(tasks, registry, run))

    async def get(ctx: Context, params: types.GetTaskRequestParams) -> types.GetTaskResult:
        task = tasks.find(identity_of(ctx.request).task_id, params.task_id)
        return types.GetTaskResult.model_validate(task.view().model_dump())

    async def result(ctx: Context, params: types.GetTaskPayloadRequestParams) -> HandlerResult:
        outcome = await tasks.result(identity_of(ctx.request).task_id, params.task_id)
        meta = {**(outcome.meta or {}), RELATED_TASK: {"taskId": params.task_id}}
        return outcome.model_copy(update={"meta": meta})

    async def listing(ctx: Context, params: types.PaginatedRequestParams) -> types.ListTasksResult:
        page, cursor = tasks.page(identity_of(ctx.request).task_id, params.cursor)
        return types.ListTasksResult(tasks=[t.view() for t in page], next_cursor=cursor)

    async def cancel(ctx: Context, params: types.CancelTaskRequestParams) -> types.CancelTaskResult:
        task = tasks.cancel(identity_of(ctx.request).task_id, params.task_id)
        return types.CancelTaskResult.model_validate(task.view().model_dump())

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, result)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, listing)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)
