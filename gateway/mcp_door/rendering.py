"""A terminal `ToolResult` as an MCP `CallToolResult`.

One rule for every status, so an agent reads every outcome the same way:
`structuredContent` is the result's public form, the same object every door returns
(`call_id`, `tool`, `status`, `output` or `error {code, message, retryable}`, `truncated`,
`replayed`); the one text block is that same object as compact JSON, for clients that
show only text; `isError` is true for every status but `succeeded`.
"""

from __future__ import annotations

import json

import mcp_types as types

from gateway.results import ToolResult


def render(result: ToolResult) -> types.CallToolResult:
    public = result.public()
    text = json.dumps(public, separators=(",", ":"), ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=public,
        is_error=not result.ok,
    )
