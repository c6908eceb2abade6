"""Which channel may answer what, by what the agent can reach.

A form elicitation is answered by whatever the agent's MCP client runs: a person, or the
agent itself. So a form may confirm one call the task's grant already covers (a tool the
product requires a person for, a handler's own ask), and nothing more: no need beyond the
grant, no grant for the rest of the task, nothing the control plane must decide. Beyond
that only channels outside the agent's reach answer: the task's tab (an element the shim
owns, real input events only), the control plane, or a page the person opens in their own
browser (URL-mode elicitation only carries the link; the answer is given on that page).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.results import Door

# The reasons a call waits (`Need.reason`) for which the grant already covers the call.
INSIDE_THE_GRANT = frozenset({"required", "the tool asks"})


def form_may_answer(request: Mapping[str, Any], scope: str = "call") -> bool:
    """Whether an answer through a form elicitation may decide `request` (its public form)
    with this scope."""
    return (
        request.get("by") == "actor"
        and request.get("reason") in INSIDE_THE_GRANT
        and scope == "call"
    )


def tab_may_answer(request: Mapping[str, Any]) -> bool:
    """Whether the task's tab may answer `request` (its public form). A call made through
    the tab's own WebMCP door is not approved in that same tab: an agent driving the page
    can press its buttons."""
    return (
        "tab" in request.get("channels", ())
        and request.get("by") == "actor"
        and request.get("door") != Door.WEBMCP.value
    )
