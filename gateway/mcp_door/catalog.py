"""A task's catalog in MCP's words: registry entries as `tools/list` tools.

The catalog is read from the registry on every `tools/list` (tools register while the
gateway runs, and each identity sees its own); only the conversion of one unchanged
entry is remembered.

Hints, mapped here (once) from the registry's annotations, which use the WebMCP spec's
names:
- `readOnlyHint` is `readOnlyHint`: the tool changes nothing.
- `consequentialHint` becomes `destructiveHint`: its effect is hard to undo.
- `untrustedContentHint` becomes `openWorldHint`: its output carries content from outside
  the product (a web page, a file), which a model should not take as instructions.
- `idempotentHint`: the tool has no side effects, so calling it again changes nothing more.

A tool that can run long (`Tool.long_running`) is listed with `execution.taskSupport:
"optional"` when the door serves tasks: a client may run it as a task it polls.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from gateway.core.identity import TaskIdentity
from gateway.core.registry import Registry

TASK_SUPPORT = types.ToolExecution(task_support="optional")


def mcp_tool(entry: dict[str, Any], *, as_task: bool = False) -> types.Tool:
    hints = entry.get("annotations", {})
    return types.Tool(
        name=entry["name"],
        title=entry.get("title"),
        description=entry.get("description"),
        input_schema=entry["input_schema"],
        annotations=types.ToolAnnotations(
            title=entry.get("title"),
            read_only_hint=bool(hints.get("readOnlyHint", False)),
            destructive_hint=bool(hints.get("consequentialHint", False)),
            idempotent_hint=not entry.get("side_effects", False),
            open_world_hint=bool(hints.get("untrustedContentHint", False)),
        ),
        execution=TASK_SUPPORT if as_task else None,
    )


class McpCatalog:
    def __init__(self, registry: Registry, *, tasks_offered: bool = False) -> None:
        self.registry = registry
        self.tasks_offered = tasks_offered
        # name -> (the registry entry it was made from, the MCP tool)
        self._converted: dict[str, tuple[dict[str, Any], types.Tool]] = {}

    def tools(self, identity: TaskIdentity) -> list[types.Tool]:
        return [self._tool(entry) for entry in self.registry.catalog(identity)]

    def _tool(self, entry: dict[str, Any]) -> types.Tool:
        known = self._converted.get(entry["name"])
        if known is not None and known[0] is entry:
            return known[1]
        found = self.registry.get(entry["tool_id"])
        as_task = self.tasks_offered and found is not None and found.long_running
        tool = mcp_tool(entry, as_task=as_task)
        self._converted[entry["name"]] = (entry, tool)
        return tool

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """A tool's schema by name, for the SDK's `Mcp-Param-*` header check (no identity)."""
        tool = self.registry.get(name)
        if tool is None:
            return None
        known = self._converted.get(name)
        if known is not None:
            return known[1].input_schema
        return tool.input_schema()
