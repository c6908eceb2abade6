"""A terminal `ToolResult` as an MCP `CallToolResult`, written for the model that reads it.

One rule for every status:
- `structuredContent` is the result's public form, the same object every door returns
  (`call_id`, `tool`, `status`, `output` or `error {code, message, retryable}`,
  `truncated`, `replayed`), for programs;
- the text block is the same result as compact text a model reads well: one status line,
  then the output's fields one a line, multi-line text (a page snapshot) as a YAML block
  with real newlines rather than JSON-escaped; for a failure its code, message and whether
  to retry, and when (`retry after 3 s`, from `error.details.retry_after_s`: an
  `overloaded` call);
- a tool whose output is a string its client parses (`Tool.text_output`: the permission
  prompt's JSON answer) has that string as its text block, nothing around it;
- an image block (a screenshot) follows when the door has one for the result, then a
  resource link for each artifact the output names (`gateway.mcp_door.links`);
- `isError` is true for every status but `succeeded`.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from gateway.core.results import ToolResult
from gateway.mcp_door.links import resource_links


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _block(text: str, indent: str) -> list[str]:
    return [f"{indent}  {line}" if line else "" for line in text.split("\n")]


def _fields(value: Any, indent: str = "") -> list[str]:
    if isinstance(value, str):
        return value.split("\n")
    if not isinstance(value, dict):
        return [_compact(value)]
    lines: list[str] = []
    for key, item in value.items():
        if item is None:
            continue
        if isinstance(item, str) and "\n" in item:
            lines.append(f"{indent}{key}: |")
            lines += _block(item, indent)
        elif isinstance(item, str):
            lines.append(f"{indent}{key}: {item}")
        elif isinstance(item, bool):
            lines.append(f"{indent}{key}: {'true' if item else 'false'}")
        elif isinstance(item, int | float):
            lines.append(f"{indent}{key}: {item}")
        else:
            lines.append(f"{indent}{key}: {_compact(item)}")
    return lines


def model_text(result: ToolResult) -> str:
    """The result as a model should read it."""
    notes = [n for n, on in (("truncated", result.truncated), ("replayed", result.replayed)) if on]
    head = f"{result.tool} {result.status.value}" + (f" ({', '.join(notes)})" if notes else "")
    lines = [head]
    if result.error is not None:
        details = dict(result.error.details or {})
        retry = details.get("retry_after_s")
        lines.append(f"error: {result.error.code}: {result.error.message}")
        if (
            result.error.retryable
            and isinstance(retry, int | float)
            and not isinstance(retry, bool)
            and retry > 0
        ):
            # A busy resource says when: a model that is told waits instead of hammering.
            lines.append(f"retryable: yes; retry after {retry:g} s")
            del details["retry_after_s"]
        else:
            lines.append(f"retryable: {'yes' if result.error.retryable else 'no'}")
        if details:
            lines.append(f"details: {_compact(details)}")
    elif result.output is not None:
        lines += _fields(result.output)
    return "\n".join(lines)


def render(
    result: ToolResult, image: types.ImageContent | None = None, *, text_output: bool = False
) -> types.CallToolResult:
    """`text_output`: the tool answers a string its client parses; it is the text block."""
    text = (
        result.output
        if text_output and result.ok and isinstance(result.output, str)
        else model_text(result)
    )
    content: list[types.ContentBlock] = [types.TextContent(text=text)]
    if image is not None:
        content.append(image)
    content += resource_links(result)
    return types.CallToolResult(
        content=content,
        structured_content=result.public(),
        is_error=not result.ok,
    )
