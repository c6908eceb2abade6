"""Which channel may answer what, for a door that holds a request's public form only.

The rule is `gateway.core.approval_policy.may_answer`; these read it for the MCP door, which
sees a pending request as its public form (`ApprovalRequest.public()`), to decide what to
offer the agent's client: a form elicitation where a form may answer (one call inside the
grant), a link to the person's own page (URL-mode elicitation only carries the link; the
answer is given on that page) where the tab may, and a link to the gateway's own approval
page (the console's, behind its sign-in) where only the control plane's party may.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from gateway.core.approval_policy import Approver, Need, Reason, may_answer
from gateway.core.results import Door


def _need(request: Mapping[str, Any]) -> Need:
    return Need(by=cast(Approver, request.get("by")), reason=cast(Reason, request.get("reason")))


def form_may_answer(request: Mapping[str, Any], scope: str = "call") -> bool:
    """Whether an answer through a form elicitation may decide `request` with `scope`."""
    return "elicitation" in request.get("channels", ()) and may_answer(
        "elicitation", _need(request), scope
    )


def tab_may_answer(request: Mapping[str, Any]) -> bool:
    """Whether the task's tab may answer `request`. A call made through the tab's own WebMCP
    door is not approved in that same tab: an agent driving the page can press its
    buttons."""
    return (
        "tab" in request.get("channels", ())
        and may_answer("tab", _need(request))
        and request.get("door") != Door.WEBMCP.value
    )


def console_may_answer(request: Mapping[str, Any]) -> bool:
    """Whether the control plane's party may answer `request` (on the console's page)."""
    return "control" in request.get("channels", ()) and may_answer("control", _need(request))


@dataclass(frozen=True)
class ApprovalPage:
    """The gateway's own page for one approval, on the gateway's host (the console's,
    behind its sign-in), provided in `gw.services` by the console."""

    base: str  # absolute, ending in "/": the approval's id follows

    def url(self, approval_id: str) -> str:
        return self.base + quote(approval_id, safe="")
