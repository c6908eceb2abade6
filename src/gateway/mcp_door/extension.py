"""The MCP door as a gateway extension: `/v1/mcp`, served by the official MCP SDK.

`install(gw)` builds the SDK server and its streamable HTTP session manager, runs the
manager for the gateway's lifetime (`gw.run_during`), closes a task's sessions when the
task ends, and returns the one route, guarded by the bearer front.

Transport choices (see docs/mcp.md for the figures):
- Responses are SSE-capable, not JSON-only: a call that finishes without sending anything
  is still answered as plain JSON by the SDK, and only a call that reports progress (or
  runs long) switches to an event stream; a JSON-only server could send no progress and,
  for the 2026 protocol, would not notice a client that cancels by hanging up.
- Sessions are kept for clients of the handshake protocol versions, because their
  cancellation (`notifications/cancelled`) names a request of a session; the 2026
  protocol is stateless per request whatever this setting says.
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import BaseRoute, Route

from gateway.mcp_door.bearer import BearerFront
from gateway.mcp_door.catalog import McpCatalog
from gateway.mcp_door.hosts import HostPolicy
from gateway.mcp_door.server import build_server
from gateway.mcp_door.sessions import TaskSessions
from gateway.runtime import Gateway

MCP_PATH = "/v1/mcp"


class McpDoor:
    """The parts of one gateway's MCP door (provided as a service, for tests and tools)."""

    def __init__(self, gw: Gateway) -> None:
        self.catalog = McpCatalog(gw.registry)
        self.server = build_server(gw, self.catalog)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=False,
            stateless=False,
            # Host and Origin are checked by the bearer front, before the token.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=gw.settings.max_body_bytes,
        )
        manager_app = StreamableHTTPASGIApp(self.manager)
        self.sessions = TaskSessions(manager_app)
        self.front = BearerFront(
            gw, manager_app, HostPolicy.from_settings(gw.settings), self.sessions
        )

    async def task_ended(self, task_id: str, reason: str) -> None:
        self.front.forget(task_id)
        await self.sessions.close_task(task_id, reason)


def install(gw: Gateway) -> list[BaseRoute]:
    door = McpDoor(gw)
    gw.services.provide(McpDoor, door)
    gw.run_during(door.manager.run)
    gw.tasks.on_end(door.task_ended)
    return [Route(MCP_PATH, endpoint=door.front)]
