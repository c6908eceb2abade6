"""The MCP door as a gateway extension: `/v1/mcp`, served by the official MCP SDK.

`install(gw)` builds the SDK server and its streamable HTTP session manager, runs the
manager for the gateway's lifetime (a part of it, `gw.add_part`), closes a task's sessions when the
task ends, and returns the one route, guarded by the bearer front.

Two SDK session managers share the one server (see dispatch.py for which serves what,
and docs/mcp.md for the figures):
- an SSE-capable, session-keeping one: progress notifications ride the call's response
  stream, and clients of the handshake protocol versions keep a session, because their
  cancellation (`notifications/cancelled`) names a request of a session;
- a JSON-response, stateless one for 2026-07-28 requests that ask for no progress, the
  common case, which it answers with less work per request.

On a node of a cluster both are stateless with JSON responses: any node answers any request.
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import BaseRoute, Route

from gateway.core.approvals.channels import ApprovalPage
from gateway.core.errors import GatewayError
from gateway.core.identity import TaskIdentity
from gateway.http.hosts import HostPolicy
from gateway.mcp_door.bearer import BearerFront
from gateway.mcp_door.call_tasks import CallTasks
from gateway.mcp_door.catalog import McpCatalog
from gateway.mcp_door.dispatch import TransportDispatch
from gateway.mcp_door.images import ImageReader
from gateway.mcp_door.input_required import ParkedCalls
from gateway.mcp_door.resources import ArtifactResources
from gateway.mcp_door.server import build_server
from gateway.mcp_door.sessions import TaskSessions
from gateway.parts import McpDoorConfig, mcp_door_config
from gateway.runtime import Gateway

MCP_PATH = "/v1/mcp"


class McpDoor:
    """The parts of one gateway's MCP door (provided as a service, for tests and tools)."""

    def __init__(self, gw: Gateway, config: McpDoorConfig, hosts: HostPolicy) -> None:
        """`hosts`: the Host and Origin values a request may carry."""
        # Calls of 2026-07-28 clients waiting for the retry that answers their approval.
        self.parked_calls = ParkedCalls(enabled=not config.clustered)
        # Long calls run as tasks a client polls; on a cluster's node a poll could reach a
        # node that holds nothing, so there tasks are not offered.
        self.call_tasks = CallTasks(enabled=not config.clustered)
        self.catalog = McpCatalog(gw.registry, tasks_offered=self.call_tasks.enabled)
        self.server = build_server(
            gw.calls,
            self.catalog,
            images=artifact_reader(gw, config.max_image_bytes) if config.image_blocks else None,
            resources=ArtifactResources(gw.store),
            task_log=gw.task_log,
            parked_calls=self.parked_calls,
            call_tasks=self.call_tasks,
            # Read when asked: the console provides its page once it is installed.
            approval_page=lambda: gw.services.find(ApprovalPage),
        )
        # Host and Origin are checked by the bearer front, before the token.
        unguarded = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        # On a node of a cluster no request may depend on a session another node holds:
        # every request is answered on its own, in JSON (no progress stream), by any node.
        clustered = config.clustered
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=clustered,
            stateless=clustered,
            security_settings=unguarded,
            max_request_body_size=config.max_body_bytes,
            session_idle_timeout=config.session_idle_s,
        )
        self.json_manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=unguarded,
            max_request_body_size=config.max_body_bytes,
        )
        streaming = StreamableHTTPASGIApp(self.manager)
        dispatch = TransportDispatch(
            streaming,
            StreamableHTTPASGIApp(self.json_manager),
            max_body_bytes=config.max_body_bytes,
        )
        self.sessions = TaskSessions(streaming, cap=config.max_sessions_per_task)
        self.front = BearerFront(gw.tasks, dispatch, hosts, self.sessions)

    async def task_ended(self, task_id: str, reason: str) -> None:
        self.front.forget(task_id)
        self.call_tasks.forget(task_id)
        await self.sessions.close_task(task_id, reason)


def artifact_reader(gw: Gateway, max_bytes: int) -> ImageReader:
    """Reads an artifact for the task that made it, and for no other, up to `max_bytes`."""

    async def read(identity: TaskIdentity, artifact_id: str) -> bytes | None:
        try:
            ref = await gw.store.get_artifact(artifact_id)
            if ref.task_id != identity.task_id or ref.size > max_bytes:
                return None
            return await gw.store.read_artifact(ref)
        except GatewayError:
            return None

    return read


def install(gw: Gateway) -> list[BaseRoute]:
    door = McpDoor(gw, mcp_door_config(gw.settings), HostPolicy.from_settings(gw.settings))
    gw.services.provide(McpDoor, door)
    gw.add_part("MCP sessions", context=door.manager.run)
    gw.add_part("MCP stateless requests", context=door.json_manager.run)
    gw.tasks.on_end(door.task_ended)
    return [Route(MCP_PATH, endpoint=door.front)]
