"""Evidence that is not a call: what a task's tab, browser and bridge did or had refused.

Two rules keep it useful under attack, while every answered call's own record is written
whatever happens (the pipeline writes those, not this log):

- Kinds that come in floods (a page making thousands of refused requests, a tab sending
  bad frames) are recorded per task and window: the first at once, then one aggregate
  record per window with the count, the first and last time and a few samples.
- A task's events have a quota. The event that reaches it is followed by one
  `evidence_quota_reached` record; later events are counted (in `/metrics` and in
  `GET /v1/tasks/{id}`) and not stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.redaction import Redactor
from gateway.core.store.database import Store

log = logging.getLogger(__name__)

WINDOW_S = 2.0
SAMPLES = 10
QUOTA_KIND = "evidence_quota_reached"


@dataclass(frozen=True, slots=True)
class EvidenceConfig:
    """What the event log is built from (made from `Settings` in gateway/parts.py)."""

    # Events (not calls) one task may leave; past it they are counted, not kept.
    max_events_per_task: int = 10_000


@dataclass
class _Window:
    identity: TaskIdentity
    kind: str
    first_at: float
    last_at: float
    count: int = 0  # events after the one written at once
    samples: list[dict[str, Any]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Usage:
    stored: int
    announced: bool = False


class EventLog:
    def __init__(
        self,
        store: Store,
        redactor: Redactor,
        config: EvidenceConfig,
        *,
        window_s: float = WINDOW_S,
        metrics: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.redactor = redactor
        self.quota = config.max_events_per_task
        self.window_s = window_s
        self._clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}
        self._usage: dict[str, _Usage] = {}
        # Events not stored, by task; only tasks that reached their quota are here.
        self._dropped_by_task: dict[str, int] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._writes: set[asyncio.Future[Any]] = set()
        self._dropped = (
            Counter(
                "gateway_evidence_events_dropped",
                "Task events not stored because the task's evidence quota was reached",
                registry=metrics,
            )
            if metrics is not None
            else None
        )

    # -- recording --------------------------------------------------------------------

    async def record(
        self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]
    ) -> str | None:
        """One event record, stored before this returns; None if over the task's quota."""
        if not await self._admit(identity):
            return None
        return await self._write(identity, kind, dict(data))

    def repeated(self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]) -> None:
        """An event of a kind that can come in floods: aggregated per task and window."""
        key = (identity.task_id, kind)
        now = self._clock()
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(identity, kind, now, now)
            window.timer = asyncio.get_running_loop().call_later(
                self.window_s, self._close_window, key
            )
            self._spawn(self.record(identity, kind, data))
            return
        window.count += 1
        window.last_at = now
        if len(window.samples) < SAMPLES:
            window.samples.append(dict(data))

    def _close_window(self, key: tuple[str, str]) -> None:
        window = self._windows.pop(key, None)
        if window is None:
            return
        if window.timer is not None:
            window.timer.cancel()
        if window.count:
            aggregate = {
                "aggregate": True,
                "count": window.count,
                "first_at": window.first_at,
                "last_at": window.last_at,
                "samples": window.samples,
            }
            self._spawn(self.record(window.identity, window.kind, aggregate))

    # -- the quota --------------------------------------------------------------------

    async def _admit(self, identity: TaskIdentity) -> bool:
        usage = await self._usage_of(identity.task_id)
        if usage.stored < self.quota:
            usage.stored += 1
            return True
        self._dropped_by_task[identity.task_id] = self._dropped_by_task.get(identity.task_id, 0) + 1
        if self._dropped is not None:
            self._dropped.inc()
        if not usage.announced:
            usage.announced = True
            await self._write(
                identity,
                QUOTA_KIND,
                {
                    "quota": self.quota,
                    "message": "this task's events reached their quota; later events are "
                    "counted, not stored (its calls are still recorded)",
                },
            )
        return False

    async def _usage_of(self, task_id: str) -> _Usage:
        usage = self._usage.get(task_id)
        if usage is not None:
            return usage
        lock = self._loading.setdefault(task_id, asyncio.Lock())
        async with lock:
            usage = self._usage.get(task_id)
            if usage is None:
                # After a restart the count goes on from what the store holds.
                stored = await self.store.event_count(task_id)
                usage = self._usage[task_id] = _Usage(stored, announced=stored > self.quota)
        self._loading.pop(task_id, None)
        return usage

    def dropped(self, task_id: str) -> int:
        """Events of the task not stored because its quota was reached."""
        return self._dropped_by_task.get(task_id, 0)

    # -- writing ----------------------------------------------------------------------

    async def _write(self, identity: TaskIdentity, kind: str, data: dict[str, Any]) -> str:
        record_id, row = self.row(identity, kind, data)
        await self.store.commit([row])
        return record_id

    def row(
        self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]
    ) -> tuple[str, tuple[Any, dict[str, Any]]]:
        """An event record as a row, for a caller that commits it with its own change (an
        approval and its decision). Outside the quota: such events are never dropped."""
        record_id = new_id("evt")
        record = {
            "event_id": record_id,
            "kind": kind,
            "task_id": identity.task_id,
            "org_id": identity.org_id,
            "actor": identity.actor.id,
            "at": self._clock(),
            "data": dict(data),
        }
        row = self.store.evidence_row(
            record_id=record_id,
            task_id=identity.task_id,
            org_id=identity.org_id,
            kind=kind,
            record=self.redactor.value(record),
        )
        return record_id, row

    def _spawn(self, coro: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(coro)
        self._writes.add(future)
        future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[Any]) -> None:
        self._writes.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.warning("a task event could not be stored: %r", future.exception())

    # -- ends -------------------------------------------------------------------------

    async def flush(self, task_id: str | None = None) -> None:
        """Write the open windows (of one task, or all) and wait for pending writes."""
        for key in [k for k in self._windows if task_id is None or k[0] == task_id]:
            self._close_window(key)
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def task_ended(self, task_id: str, _reason: str) -> None:
        await self.flush(task_id)
        with contextlib.suppress(KeyError):
            del self._usage[task_id]
