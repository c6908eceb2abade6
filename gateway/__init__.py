"""A browser-session gateway: one authorized tool router behind three doors.

Agents reach a product's live UI through this gateway: over MCP, over WebMCP in the
dashboard tab, or over the parent tool bridge from a sandboxed runtime. Every call is
authorized against a task identity captured on the server, runs through one pipeline,
and leaves evidence under the task's owner.
"""

from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.identity import Actor, Budget, Sandbox, TaskIdentity
from gateway.core.registry import Registry, Tool, ToolAnnotations, ToolContext
from gateway.core.results import Door, ErrorCode, ToolError, ToolResult, ToolStatus

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "Budget",
    "Door",
    "ErrorCode",
    "GatewayError",
    "Registry",
    "Sandbox",
    "TaskIdentity",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolError",
    "ToolFailure",
    "ToolResult",
    "ToolStatus",
    "__version__",
]
