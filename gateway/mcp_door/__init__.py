"""The MCP door: `/v1/mcp`, the official MCP SDK's streamable HTTP server in front of the
registry pipeline, behind the gateway's own `agent` bearer check."""

from gateway.mcp_door.extension import MCP_PATH, McpDoor, install

__all__ = ["MCP_PATH", "McpDoor", "install"]
