"""What the tab channel's core asks its I/O layer to do: the effects its methods return.

Each is a frozen record; the core returns them in the order they must be carried out
(`gateway/tabs/channel.py` says when each comes, `gateway/tabs/hub.py` carries them out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.tabs.outcome import TabOutcome


@dataclass(frozen=True)
class Send:
    conn: str
    frame: dict[str, Any]


@dataclass(frozen=True)
class Close:
    conn: str
    code: int
    reason: str


@dataclass(frozen=True)
class Settle:
    """A request reached its terminal outcome; whoever awaits it gets `outcome`."""

    outcome: TabOutcome


@dataclass(frozen=True)
class Rejected:
    """A frame was refused: count it and record it as evidence (the `error` frame is a
    separate `Send`)."""

    conn: str
    reason: str
    message: str
    frame_type: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StartCall:
    conn: str
    call_id: str
    tool: str
    input: dict[str, Any]
    webmcp: bool


@dataclass(frozen=True)
class CancelCall:
    conn: str
    call_id: str


@dataclass(frozen=True)
class Answer:
    """A person answered an approval in the tab; the hub hands it to the approvals desk
    (which checks the nonce, the approver and the expiry)."""

    conn: str
    approval_id: str
    decision: str
    scope: str
    nonce: str


Effect = Send | Close | Settle | Rejected | StartCall | CancelCall | Answer
