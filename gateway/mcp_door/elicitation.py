"""Asking the person at the agent's client, by MCP elicitation, only what it may answer.

Whatever the agent's client runs answers a form, so a form is put only where a form may
decide (`gateway.core.approvals.channels`): one call inside the task's grant, approved once or
refused. For anything beyond that, a client that declared URL mode is given a link (`link_for`):
to the task's dashboard where the tab may answer (the tab shows the request and a person
answers it with real input events), else to the gateway's own approval page, where the
control plane's party answers behind the console's sign-in (a need `by: "control"`, or a
call the tab may not approve). The client's reply to a link means only that it was shown,
never a decision, and no link is a form: nothing the agent's client sends answers it.
Nothing else is sent: the other channels (the tab, the control plane) still answer.

Used when the client declared the `elicitation` capability (the bare capability means
form) and the exchange can carry a request from the server (a session, or a response
stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext

from gateway.core.approvals.channels import (
    ApprovalPage,
    console_may_answer,
    form_may_answer,
    tab_may_answer,
)
from gateway.core.ports import Elicit
from gateway.mcp_door.bearer import identity_of

APPROVE_ONCE = "approve once"
DENY = "deny"
CHOICES = {APPROVE_ONCE: ("approve", "call"), DENY: ("deny", "call")}
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


def link_message(request: Mapping[str, Any], page: str) -> str:
    return (
        f"A person must approve {request['tool']} in the task's dashboard ({page}); "
        "it is shown there, and answered there, not here."
    )


def link_for(
    request: Mapping[str, Any], dashboard: str | None, console: ApprovalPage | None
) -> tuple[str, str] | None:
    """The (url, message) of a URL-mode elicitation for `request`, or None: where a person
    answers what the agent's client may not."""
    if dashboard and tab_may_answer(request):
        return dashboard, link_message(request, dashboard)
    if console is not None and console_may_answer(request):
        url = console.url(str(request["approval_id"]))
        return url, (
            f"{request['tool']} waits for the control plane's approval, given on the "
            f"gateway's approval page ({url}) by someone signed in there, not here."
        )
    return None


def choice_of(action: str, content: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """A form's reply as (decision, scope); None when it decides nothing."""
    if action == "decline":
        return ("deny", "call")
    if action != "accept" or not content:
        return None
    return CHOICES.get(str(content.get("decision")))


def elicitor(
    ctx: ServerRequestContext[Any, Any], console: ApprovalPage | None = None
) -> Elicit | None:
    """How this request's client can be asked, or None when it cannot."""
    session = ctx.session
    declared = session.client_capabilities
    if declared is None or declared.elicitation is None:
        return None
    if not session.can_send_request:
        return None
    by_url = declared.elicitation.url is not None
    by_form = declared.elicitation.form is not None or not by_url
    page = identity_of(ctx.request).sandbox.app_origin

    async def ask(request: Mapping[str, Any]) -> tuple[str, str] | None:
        if by_form and form_may_answer(request):
            answer = await session.elicit_form(
                message_of(request), FORM, related_request_id=ctx.request_id
            )
            return choice_of(answer.action, answer.content)
        link = link_for(request, page, console) if by_url else None
        if link is not None:
            url, message = link
            await session.elicit_url(
                message, url, str(request["approval_id"]), related_request_id=ctx.request_id
            )
        return None

    return ask
