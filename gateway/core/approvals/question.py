"""What a call asks a person: one `Question` handed to `Approvals.ask`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.core.approval_policy import Need
from gateway.core.identity import TaskIdentity
from gateway.core.ports import Elicit
from gateway.core.registry import ProgressFn
from gateway.core.results import Door


@dataclass(frozen=True)
class Question:
    """One approval to ask for: whose call, what for, and how to reach its caller. The
    policy it is asked under is the task's own (`identity.approvals`)."""

    identity: TaskIdentity
    need: Need
    call_id: str
    tool: str
    door: Door
    input_digest: str
    summary: str
    details: dict[str, Any] | None = None
    cancel: asyncio.Event | None = None
    progress: ProgressFn | None = None
    elicit: Elicit | None = None
    secret_values: Iterable[str] = ()
