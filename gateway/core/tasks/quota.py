"""How many live tasks an organization may hold at once, and the admission that keeps it.

A task is live from its creation until it ends or expires. The count is read from the
store, not from this process's cache, so tasks created before a restart (or forgotten by
the cache's sweep) still count. Counting and inserting happen under one lock per
organization: of many concurrent creates at the limit exactly the free slots are admitted,
and other organizations never wait on it. The lock holds within one process; gateways that
share one database each keep their own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.core.errors import QuotaExceeded
from gateway.core.store.database import Store


@dataclass
class _OrgLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class LiveTaskQuota:
    def __init__(self, store: Store, limit: int) -> None:
        self._store = store
        self.limit = limit
        # Only organizations with a create in progress have an entry, so the map stays as
        # small as the number of concurrent creates, whatever the number of organizations.
        self._locks: dict[str, _OrgLock] = {}

    @contextlib.asynccontextmanager
    async def admit(self, org_id: str, now: float) -> AsyncIterator[int]:
        """Hold `org_id`'s slot check for the block, which inserts the task; raises
        `QuotaExceeded` (and runs nothing) when the organization is at its limit. Yields the
        count of live tasks before this one."""
        entry = self._locks.setdefault(org_id, _OrgLock())
        entry.users += 1
        try:
            async with entry.lock:
                current = await self._store.live_task_count(org_id, now)
                if current >= self.limit:
                    raise QuotaExceeded(
                        f"organization {org_id!r} already has {current} live tasks, its limit "
                        f"of {self.limit}; end one before creating another",
                        details={
                            "quota": "live_tasks",
                            "org_id": org_id,
                            "limit": self.limit,
                            "current": current,
                            "adding": 1,
                        },
                    )
                yield current
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[org_id]
