"""A task's end, across a cluster: told to every node on `gw.ended` when it ends here, and
read back from the ledger every `POLL_ENDS_S` (the ends of the last `ENDS_LOOKBACK_S`), so
a lost message costs at most that long. Every node then refuses the task's tokens and lets
go of it; an end heard from another node is told to this node's listeners and not
announced again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.tasks.service import TaskService

from .ledger import Ledger
from .owners import Owners
from .subjects import ENDED

log = logging.getLogger(__name__)
POLL_ENDS_S = 0.5
# Task ends are read back this far (on the database's clock): an end whose message was
# lost, or committed a moment late, is still found.
ENDS_LOOKBACK_S = 30.0

# Tells every node a message on a subject (sealed on the way).
Broadcast = Callable[[str, dict[str, Any]], Awaitable[None]]


class Ends:
    def __init__(
        self, ledger: Ledger, tasks: TaskService, owners: Owners, broadcast: Broadcast
    ) -> None:
        self.ledger = ledger
        self.tasks = tasks
        self.owners = owners
        self._broadcast = broadcast
        # Ends heard from other nodes: told to this node's listeners, not announced again.
        self._heard: set[str] = set()

    async def announce(self, task_id: str, reason: str) -> None:
        """The task ended on this node (a listener of the task service)."""
        self.owners.ended(task_id)
        if task_id in self._heard:
            return
        await self._broadcast(ENDED, {"task_id": task_id, "reason": reason, "at": time.time()})

    async def heard(self, message: dict[str, Any]) -> None:
        """Another node's word (opened) that a task ended."""
        await self.ended_elsewhere(message["task_id"], message["at"], message["reason"])

    async def ended_elsewhere(self, task_id: str, at: float, reason: str) -> None:
        self._heard.add(task_id)
        try:
            await self.tasks.ended_elsewhere(task_id, at, reason)
        finally:
            self._heard.discard(task_id)

    async def read_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_ENDS_S)
            try:
                since = await self.ledger.now() - ENDS_LOOKBACK_S
                for ended in await self.ledger.ended_since(since):
                    await self.ended_elsewhere(ended.task_id, ended.revoked_at, ended.reason)
            except GatewayError as exc:
                log.warning("cluster: reading task ends failed: %s", exc)
