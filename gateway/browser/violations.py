"""What the guard stopped for one task, and the denial of the call that observes it.

The origin proxy refuses requests, and the session's page-side checks refuse navigations,
frames and popups. Each is a `Violation`, recorded as evidence at once (aggregated per
task and window); the ones that `denies` end the task's next call that returns
`denied`/`origin_blocked`, and the others are said in its evidence (`blocked`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus

from .guards import BlockedRequest


@dataclass(frozen=True)
class Violation:
    """Something the guard stopped. `denies`: it ends the call that observes it."""

    kind: str
    target: str
    denies: bool
    at: float

    def public(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target[:512], "denies": self.denies}


def refused_kind(request: BlockedRequest) -> str:
    """The kind of violation a request the proxy refused is."""
    kind = "navigation_refused" if request.navigation else "request_refused"
    if request.method == "CONNECT":
        kind = "tunnel_refused"
    return kind


def denial(pending: list[Violation], page_url: str) -> ToolFailure | None:
    """The origin_blocked failure for what the guard stopped since the last call, if any."""
    denying = [v for v in pending if v.denies]
    if not denying:
        return None
    first = denying[0]
    return ToolFailure(
        ToolStatus.DENIED,
        ErrorCode.ORIGIN_BLOCKED,
        f"the task's browser was kept from leaving its allowed origins ({first.kind}: "
        f"{first.target[:200]})",
        details={"blocked": [v.public() for v in pending][:20], "page": page_url[:512]},
    )
