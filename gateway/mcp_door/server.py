"""The MCP server behind the door: `tools/list` and `tools/call` over the registry pipeline.

Built on the SDK's low-level `Server`. Both handlers take the identity from the HTTP
request that carried the message (put there by the bearer front), never from the message.

`tools/call` runs `gw.calls.call(..., door=Door.MCP)` (the pipeline, or a cluster's routing):
- `_meta.idempotency_key` (a string) is passed on as the call's idempotency key;
- when the client sent `_meta.progressToken`, the handler's progress reports become MCP
  progress notifications on the call's own response stream;
- when the client cancels (`notifications/cancelled` on a session, or closing the response
  stream of a 2026 request) the SDK cancels this handler; the pipeline call runs in a task
  of its own and is told through its cancel event, so the tool handler is cancelled (and
  whatever UI action it waits on with it) and the call still ends in one recorded
  `failed`/`cancelled` result;
- with `params.task`, a long-running tool's call runs as an MCP task instead
  (`task_requests.py`), through the same pipeline and the same rendering.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.core.approvals.channels import ApprovalPage
from gateway.core.errors import NotFound
from gateway.core.identity import TaskIdentity
from gateway.core.ports import CallRunner, Elicit
from gateway.core.registry import ProgressFn
from gateway.core.results import Door, ToolResult
from gateway.core.tasks.log import Level, TaskLog, at_least
from gateway.mcp_door import task_requests
from gateway.mcp_door.bearer import identity_of
from gateway.mcp_door.call_tasks import CANCEL_GRACE_S, CallTasks
from gateway.mcp_door.catalog import McpCatalog
from gateway.mcp_door.elicitation import elicitor
from gateway.mcp_door.images import ImageReader, image_block
from gateway.mcp_door.input_required import Parked, ParkedCalls, StaleState, arguments_digest
from gateway.mcp_door.rendering import render
from gateway.mcp_door.resources import ArtifactResources
from gateway.mcp_door.task_requests import TaskServer

IDEMPOTENCY_META_KEY = "idempotency_key"
MAX_IDEMPOTENCY_KEY = 200

Context = ServerRequestContext[Any, Any]


def idempotency_key(meta: dict[str, Any] | None) -> str | None:
    value = (meta or {}).get(IDEMPOTENCY_META_KEY)
    if isinstance(value, str) and 0 < len(value) <= MAX_IDEMPOTENCY_KEY:
        return value
    return None


def progress_of(ctx: Context) -> ProgressFn | None:
    if ctx.meta is None or ctx.meta.get("progress_token") is None:
        return None
    return ctx.session.report_progress


async def call_until_cancelled(
    calls: CallRunner,
    identity: TaskIdentity,
    name: str,
    arguments: dict[str, Any] | None,
    *,
    key: str | None,
    progress: ProgressFn | None,
    elicit: Elicit | None = None,
) -> ToolResult:
    cancel = asyncio.Event()
    call = asyncio.ensure_future(
        calls.call(
            identity,
            name,
            arguments,
            door=Door.MCP,
            idempotency_key=key,
            progress=progress,
            cancel=cancel,
            elicit=elicit,
        )
    )
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        # Cancelled by the client (or the server stopping): the pipeline cancels the tool
        # handler and records the call as cancelled; wait for that record, bounded.
        cancel.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
            await asyncio.wait([call])
        raise


def parks_for(
    ctx: Context,
    identity: TaskIdentity,
    params: types.CallToolRequestParams,
    parked_calls: ParkedCalls,
    console: ApprovalPage | None = None,
) -> Parked | None:
    """A parked call for a client that can be asked only by an `input_required` result
    (the 2026-07-28 protocol, with elicitation declared), or None."""
    session = ctx.session
    declared = session.client_capabilities
    if declared is None or declared.elicitation is None or session.can_send_request:
        return None
    if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return None
    if not parked_calls.has_room(identity.task_id):
        return None
    by_url = declared.elicitation.url is not None
    return Parked(
        task_id=identity.task_id,
        digest=arguments_digest(params.name, params.arguments),
        by_form=declared.elicitation.form is not None or not by_url,
        by_url=by_url,
        page=identity.sandbox.app_origin,
        console=console,
    )


async def until_answered(parked: Parked) -> ToolResult | types.InputRequiredResult:
    """The parked call's next outcome; a client that hangs up cancels the call, as a
    2026-07-28 client cancels, and the call still ends in one recorded result."""
    try:
        return await parked.next()
    except asyncio.CancelledError:
        parked.cancel.set()
        if parked.call is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
                await asyncio.wait([parked.call])
        raise


def build_server(
    calls: CallRunner,
    catalog: McpCatalog,
    *,
    images: ImageReader | None = None,
    resources: ArtifactResources | None = None,
    task_log: TaskLog | None = None,
    parked_calls: ParkedCalls | None = None,
    call_tasks: CallTasks | None = None,
    approval_page: Callable[[], ApprovalPage | None] = lambda: None,
) -> Server[Any]:
    parked_calls = parked_calls if parked_calls is not None else ParkedCalls()

    async def answer(
        outcome: ToolResult, identity: TaskIdentity, name: str
    ) -> types.CallToolResult:
        image = await image_block(outcome, identity, images) if images is not None else None
        tool = catalog.registry.get(name)
        return render(outcome, image, text_output=tool is not None and tool.text_output)

    async def run_as_task(
        identity: TaskIdentity, params: types.CallToolRequestParams, cancel: asyncio.Event
    ) -> types.CallToolResult:
        meta = dict(params.meta) if params.meta else None
        outcome = await calls.call(
            identity,
            params.name,
            params.arguments,
            door=Door.MCP,
            idempotency_key=idempotency_key(meta),
            # The exchange that asked is over: a person answers in the tab or the control
            # plane, and the task's client polls.
            cancel=cancel,
        )
        return await answer(outcome, identity, params.name)

    async def list_tools(
        ctx: Context, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # Read fresh on every request: tools register while the gateway runs.
        return types.ListToolsResult(tools=catalog.tools(identity_of(ctx.request)))

    async def call_tool(
        ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        identity = identity_of(ctx.request)
        meta = dict(params.meta) if params.meta else None
        parked: Parked | None = None
        if params.request_state is not None:
            try:
                parked = parked_calls.find(
                    params.request_state, identity.task_id, params.name, params.arguments
                )
            except StaleState as exc:
                raise MCPError(INVALID_PARAMS, str(exc)) from None
            parked.answer(params.input_responses)
            outcome = await until_answered(parked)
        elif (
            parked := parks_for(ctx, identity, params, parked_calls, approval_page())
        ) is not None:
            parked.call = asyncio.ensure_future(
                calls.call(
                    identity,
                    params.name,
                    params.arguments,
                    door=Door.MCP,
                    idempotency_key=idempotency_key(meta),
                    # No progress: the call outlives the exchange that asked for it.
                    cancel=parked.cancel,
                    elicit=parked.ask,
                )
            )
            parked_calls.park(parked)
            outcome = await until_answered(parked)
        else:
            outcome = await call_until_cancelled(
                calls,
                identity,
                params.name,
                params.arguments,
                key=idempotency_key(meta),
                progress=progress_of(ctx),
                elicit=elicitor(ctx, approval_page()),
            )
        if isinstance(outcome, types.InputRequiredResult):
            return outcome
        if parked is not None:
            parked_calls.done_with(parked)
        return await answer(outcome, identity, params.name)

    async def set_logging_level(
        ctx: Context, params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """From now on this session hears the task's log at `level` and above."""
        identity = identity_of(ctx.request)
        session, floor = ctx.session, params.level

        async def forward(level: Level, logger: str, data: dict[str, Any]) -> None:
            if at_least(level, floor):
                with warnings.catch_warnings():  # deprecated in 2026, as above
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    sending = session.send_log_message(level, data, logger=logger)
                await sending

        if task_log is not None:
            task_log.subscribe(identity.task_id, session, forward)
        return types.EmptyResult()

    async def list_resources(
        ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        assert resources is not None
        return await resources.list(identity_of(ctx.request), params.cursor if params else None)

    async def read_resource(
        ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        assert resources is not None
        try:
            return await resources.read(identity_of(ctx.request), str(params.uri))
        except NotFound as exc:
            # Invalid params, as the 2026 protocol answers an unknown resource.
            raise MCPError(INVALID_PARAMS, exc.message) from None

    # `logging/setLevel` is deprecated by the 2026-07-28 protocol (SEP-2577); clients of
    # 2025-11-25 (the TypeScript SDK, Claude Desktop) still use it, so it stays offered.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = TaskServer(
            "gateway",
            version=_version(),
            instructions=(
                "Tools of one task. The catalog is what this task may call; every call is "
                "authorized again and recorded as evidence."
            ),
            get_tool_input_schema=catalog.input_schema,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_set_logging_level=set_logging_level if task_log is not None else None,
            on_list_resources=list_resources if resources is not None else None,
            on_read_resource=read_resource if resources is not None else None,
        )
    # The SDK's tracing middleware is a no-op without an exporter, but still costs every
    # message a span; the gateway has its own metrics and evidence.
    server.middleware = []
    if call_tasks is not None:
        task_requests.install(server, call_tasks, catalog.registry, run_as_task)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gateway")
    except PackageNotFoundError:
        return "0"
