"""The store: every repository over one open engine and one group-commit writer.

Evidence of a call must be durable before its result is returned; the writer
(gateway/core/store/writer.py) commits every record queued while the previous transaction was
committing in one transaction, and each caller awaits the commit of the batch that holds
its record, so nothing is acknowledged before it is stored.

What the store holds is read and written by one repository a concept (tasks.py,
evidence.py, idempotency.py, approvals.py, artifacts.py); `Store` is all of them over the
store's open form (opened.py: the engine, the writer and the turn of the loop that groups a
batch). A `Store` is built from its config before anything touches the disk, and is open
inside `async with store:` (the gateway enters it as the first of its parts); outside it,
every read and write is refused, here, in one place.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.core.errors import StorageError
from gateway.core.store.approvals import ApprovalRows
from gateway.core.store.artifacts import ArtifactRows
from gateway.core.store.config import StoreConfig
from gateway.core.store.evidence import EvidenceRows
from gateway.core.store.idempotency import IdempotencyRows
from gateway.core.store.objects import LocalObjects, ObjectStore
from gateway.core.store.opened import OpenStore
from gateway.core.store.repository import Rows
from gateway.core.store.sqlite import sqlite_url
from gateway.core.store.tasks import TaskRows

__all__ = ["Store", "sqlite_url"]


class Store(TaskRows, EvidenceRows, IdempotencyRows, ApprovalRows, ArtifactRows):
    def __init__(self, config: StoreConfig, *, objects: ObjectStore | None = None) -> None:
        self.config = config
        self.url = config.url
        self.data_dir = config.data_dir
        self._open: OpenStore | None = None
        # Where artifact bytes live (gateway.core.store.objects); the rows stay here.
        self.objects = objects if objects is not None else LocalObjects(config.data_dir)
        self.max_artifacts_per_task = config.max_artifacts_per_task
        self._artifact_locks = weakref.WeakValueDictionary()

    @property
    def opened(self) -> OpenStore:
        """The store's open form; the one refusal of a store used before it is open or
        after it closed."""
        if self._open is None:
            raise StorageError("the store is not open")
        return self._open

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    async def __aenter__(self) -> Store:
        if self._open is not None:
            raise StorageError("the store is open already")
        self._open = await OpenStore.open(self.config)
        return self

    async def __aexit__(self, *exc: object) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            await opened.close()
        await self.objects.close()

    # -- what the repositories read and commit through ----------------------------------

    @property
    def engine(self) -> AsyncEngine:
        return self.opened.engine

    async def commit(self, rows: Rows) -> None:
        await self.opened.commit(rows)

    def enqueue(self, rows: Rows) -> asyncio.Future[None]:
        return self.opened.enqueue(rows)

    async def commit_if(self, guard: Any, params: Mapping[str, Any], rows: Rows = ()) -> bool:
        return await self.opened.commit_if(guard, params, rows)

    # -- the writer's figures ------------------------------------------------------------

    @property
    def batches(self) -> int:
        """Commits made by the writer, for metrics and benchmarks."""
        return self.opened.batches

    @property
    def checkpoints(self) -> int:
        """SQLite checkpoints run off the commit path so far (0 on PostgreSQL)."""
        return self.opened.checkpoints

    def commit_wait(self) -> float:
        """Seconds a record queued now can expect to wait for its commit (0 when the
        writer is idle); a call whose deadline is nearer is turned away before it runs."""
        # Nothing waits on a closed store: a call goes on to its commit, which is refused.
        return self._open.commit_wait() if self._open is not None else 0.0
