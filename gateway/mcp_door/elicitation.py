"""Asking the person at the agent's client: an approval as an MCP form elicitation.

Used when the client declared the `elicitation` capability (form mode, or the bare
capability, which means form) and the exchange can carry a request from the server (a
session, or a response stream). The form is one choice; `decline` is a refusal, `cancel`
(the person closed it) leaves the approval to the task's other channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext

from gateway.ports import Elicit

APPROVE_ONCE = "approve once"
APPROVE_FOR_TASK = "approve for this task"
DENY = "deny"
CHOICES = {
    APPROVE_ONCE: ("approve", "call"),
    APPROVE_FOR_TASK: ("approve", "task"),
    DENY: ("deny", "call"),
}
FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Your decision",
            "enum": list(CHOICES),
        }
    },
    "required": ["decision"],
}


def message_of(request: Mapping[str, Any]) -> str:
    lines = [f"Approve {request['tool']}?", str(request.get("summary", ""))]
    if request.get("details"):
        lines += [f"{key}: {value}" for key, value in request["details"].items()]
    return "\n".join(line for line in lines if line)


def elicitor(ctx: ServerRequestContext[Any, Any]) -> Elicit | None:
    """How this request's client can be asked, or None when it cannot."""
    session = ctx.session
    declared = session.client_capabilities
    if declared is None or declared.elicitation is None:
        return None
    if declared.elicitation.form is None and declared.elicitation.url is not None:
        return None  # URL mode only
    if not session.can_send_request:
        return None

    async def ask(request: Mapping[str, Any]) -> tuple[str, str] | None:
        answer = await session.elicit_form(
            message_of(request), FORM, related_request_id=ctx.request_id
        )
        if answer.action == "decline":
            return ("deny", "call")
        if answer.action != "accept" or not answer.content:
            return None
        return CHOICES.get(str(answer.content.get("decision")))

    return ask
