"""The MCP door: `/v1/mcp`, the official MCP SDK's streamable HTTP server in front of the
registry pipeline, behind the gateway's own `agent` bearer check.

The names below are imported when first asked for, not with the package: gateway/parts.py
(imported by gateway/runtime.py) reads `gateway.mcp_door.config`, and importing the door
with the package would import the runtime back before it is defined.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.mcp_door.extension import MCP_PATH, McpDoor, install

__all__ = ["MCP_PATH", "McpDoor", "install"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("gateway.mcp_door.extension"), name)
