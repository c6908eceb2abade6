"""When each pending UI action request expires, behind one timer armed for the earliest.

A timer of its own per request cost more than the rest of the request's bookkeeping;
here a request is one heap entry, and the timer moves only for a deadline earlier than
every other. A settled request's entry stays until its time comes (it expires nothing
then), or until a compaction keeps only the live ones.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable, Mapping
from typing import Any


class Deadlines:
    COMPACT_AT = 1024

    def __init__(self, expire: Callable[[str, str], None]) -> None:
        self._expire = expire
        self._heap: list[tuple[float, str, str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def add(
        self, loop: asyncio.AbstractEventLoop, when: float, task_id: str, request_id: str
    ) -> None:
        heapq.heappush(self._heap, (when, task_id, request_id))
        if when < self._armed_at:
            self._arm(loop, when)

    def compact(self, live: Mapping[str, Any]) -> None:
        """Drop the entries of settled requests once they outnumber the live ones."""
        if len(self._heap) >= self.COMPACT_AT and len(self._heap) > 4 * len(live):
            self._heap = [entry for entry in self._heap if entry[2] in live]
            heapq.heapify(self._heap)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._armed_at = math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = loop.call_at(when, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._armed_at = math.inf
        now = loop.time()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _when, task_id, request_id = heapq.heappop(heap)
            self._expire(task_id, request_id)
        if heap:
            self._arm(loop, heap[0][0])
