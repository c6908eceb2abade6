"""How the task browser reaches a task's provisioned app: the port gateway/sandbox fills.

A provisioned app listens on no network: its origin (`http://sbx-….sandbox.internal`) is
one no name server answers, and the task's guard proxy forwards requests for it through
`opener` (a stream to the app) instead of a TCP connection. Whether the origin is allowed
at all stays the proxy's one rule (the task's origins); this only says how to get there.
`unavailable` says why the app cannot serve the task's calls right now (restarting,
down), and a browser call then ends `unavailable`/`sandbox_unavailable`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class AppLink(Protocol):
    async def attach(self, identity: TaskIdentity) -> None:
        """Before the task's browser starts: find the task's app if another process of
        the gateway provisioned it (a node the task moved from)."""
        ...

    def opener(self, identity: TaskIdentity) -> Opener | None:
        """How to reach the task's app origin, when the gateway provisioned it."""
        ...

    def unavailable(self, identity: TaskIdentity) -> ToolFailure | None:
        """Why the task's provisioned app cannot serve a call now; None when it can (or
        when the task has no provisioned app)."""
        ...
