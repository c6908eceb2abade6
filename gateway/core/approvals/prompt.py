"""`approval.prompt` (listed as `approval_prompt`): the permission-prompt tool of sandboxed
coding agents.

An agent runtime that asks "may I use this tool with this input?" before each use calls it
with `{tool_name, input, tool_use_id?}`; the gateway asks a person through the task's
channels, and the one text block of the answer is the decision as JSON, as such runtimes
parse it: `{"behavior": "allow", "updatedInput": {...}}` or
`{"behavior": "deny", "message": "..."}`. A refusal and no answer in time are answers
(`deny`), not failures; the approval itself keeps its status (`denied`, `expired`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gateway.core.approval_policy import Approver
from gateway.core.errors import ToolFailure
from gateway.core.recording import input_digest
from gateway.core.registry import Tool, ToolAnnotations, ToolContext
from gateway.core.results import ErrorCode

PROMPT_SCOPE = "approvals:prompt"
# The person's time is not the tool's: its deadline pauses while they decide, so this only
# bounds the asking itself.
PROMPT_TIMEOUT_S = 30.0
SHOWN_INPUT_CHARS = 1200


class PromptArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    input: dict[str, Any] = Field(default_factory=dict)
    tool_use_id: Annotated[str, StringConstraints(max_length=256)] | None = None


def _approver(ctx: ToolContext, tool_name: str) -> Approver:
    """The control plane when the task's policy reserves this tool for it; else its user."""
    for entry in ctx.identity.approvals.grantable:
        if entry.tool == tool_name and entry.by == "control":
            return "control"
    return "actor"


def _summary(args: PromptArgs) -> str:
    shown = json.dumps(args.input, ensure_ascii=False, sort_keys=True)
    if len(shown) > SHOWN_INPUT_CHARS:
        shown = shown[:SHOWN_INPUT_CHARS] + "…"
    return f"The agent asks to use {args.tool_name} with {shown}"


async def prompt(ctx: ToolContext, args: PromptArgs) -> str:
    details = {
        "tool_name": args.tool_name,
        "tool_use_id": args.tool_use_id,
        "input_sha256": input_digest(args.input),
    }
    try:
        await ctx.request_approval(_summary(args), details, by=_approver(ctx, args.tool_name))
    except ToolFailure as exc:
        if exc.code not in (ErrorCode.APPROVAL_DENIED, ErrorCode.APPROVAL_TIMEOUT):
            raise
        return json.dumps({"behavior": "deny", "message": exc.message})
    # The input approved is the input asked about: the person saw exactly this.
    return json.dumps({"behavior": "allow", "updatedInput": args.input})


PROMPT_TOOL = Tool(
    name="approval.prompt",
    title="Ask a person for permission",
    description=(
        "Ask the task's person whether a tool may be used with the given input. Answers "
        'JSON text: {"behavior": "allow", "updatedInput": {...}} or '
        '{"behavior": "deny", "message": "..."}.'
    ),
    input_model=PromptArgs,
    handler=prompt,
    scopes=frozenset({PROMPT_SCOPE}),
    annotations=ToolAnnotations(read_only_hint=True),
    timeout_s=PROMPT_TIMEOUT_S,
    text_output=True,
    long_running=True,
)
