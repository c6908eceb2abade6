"""Idempotency keys: calls under one (task, tool, key) run one at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from gateway.core.registry import Tool


@dataclass
class _KeyLock:
    lock: asyncio.Lock
    holders: int = 0


class KeyLocks:
    """One lock per (task, tool, idempotency key), dropped when no call holds or awaits it.

    The lock is held until the first call's record is committed: a concurrent replay then
    finds it in the store."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str, str], _KeyLock] = {}

    @contextlib.asynccontextmanager
    async def held(self, task_id: str, tool: str, key: str) -> AsyncIterator[None]:
        name = (task_id, tool, key)
        entry = self._locks.setdefault(name, _KeyLock(asyncio.Lock()))
        entry.holders += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.holders -= 1
            if entry.holders == 0:
                del self._locks[name]

    def holding(
        self, task_id: str, tool: Tool | None, key: str | None
    ) -> AbstractAsyncContextManager[None]:
        """The hold a call takes: its key's lock when the tool has side effects and the key
        is not empty (a replay of such a call must find the first one's record), else none."""
        if tool is None or not tool.side_effects or not key:
            return contextlib.nullcontext()
        return self.held(task_id, tool.name, key)

    def __len__(self) -> int:
        return len(self._locks)
