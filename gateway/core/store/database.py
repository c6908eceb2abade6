"""The store: an async SQLAlchemy engine for reads, and a group-commit writer for evidence.

Evidence of a call must be durable before its result is returned; the writer
(gateway/core/store/writer.py) commits every record queued while the previous transaction was
committing in one transaction, and each caller awaits the commit of the batch that holds
its record, so nothing is acknowledged before it is stored.

The records asked for in one turn of the event loop form one batch (the calls that finish
together share a commit even when the writer is idle), handed to the writer once the turn
is over. The writer is one thread with a plain (sync) connection: an async engine costs
about 0.6 ms per commit in thread hops on SQLite, and one writer is all SQLite allows at a
time anyway.

What the store holds is read and written by one repository a concept (tasks.py,
evidence.py, idempotency.py, approvals.py, artifacts.py); `Store` is all of them over this
engine and this writer.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.core.errors import StorageError
from gateway.core.private_files import private_dir, private_file
from gateway.core.store import migrate, sqlite, writer
from gateway.core.store.approvals import ApprovalRows
from gateway.core.store.artifacts import ArtifactRows
from gateway.core.store.commit import settle
from gateway.core.store.config import StoreConfig
from gateway.core.store.evidence import EvidenceRows
from gateway.core.store.idempotency import IdempotencyRows
from gateway.core.store.objects import LocalObjects, ObjectStore
from gateway.core.store.repository import Rows
from gateway.core.store.sqlite import sqlite_url
from gateway.core.store.statements import Row
from gateway.core.store.tasks import TaskRows
from gateway.core.store.writer import Guarded, Pending, Writer

__all__ = ["Store", "sqlite_url"]


class Store(TaskRows, EvidenceRows, IdempotencyRows, ApprovalRows, ArtifactRows):
    def __init__(self, config: StoreConfig, *, objects: ObjectStore | None = None) -> None:
        self.config = config
        self.url = config.url
        self.data_dir = config.data_dir
        self._synchronous = config.synchronous.upper()
        self._engine: AsyncEngine | None = None
        self._writer: Writer | None = None
        self._turn: Pending | None = None  # the rows asked for in this turn of the loop
        # The loop whose current turn already committed on its own thread.
        self._inline_turn: asyncio.AbstractEventLoop | None = None
        # Where artifact bytes live (gateway.core.store.objects); the rows stay here.
        self.objects = objects if objects is not None else LocalObjects(config.data_dir)
        self.max_artifacts_per_task = config.max_artifacts_per_task
        self._artifact_locks = weakref.WeakValueDictionary()

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise StorageError("the store is not started")
        return self._engine

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    async def start(self) -> None:
        private_dir(self.data_dir)
        private_dir(self.data_dir / "artifacts")
        engine = create_async_engine(self.url)
        if self.is_sqlite:
            # SQLite gives its -wal and -shm files the database file's mode.
            for path in sqlite.database_files(self.url):
                if path.exists() or path.name.endswith(".db"):
                    private_file(path)
            # The reads wait for a lock as long as the writer does.
            pragmas = sqlite.pragmas(self._synchronous, busy_timeout_ms=writer.BUSY_TIMEOUT_MS)
            event.listen(engine.sync_engine, "connect", pragmas)

        # The schema is Alembic's: brought to this release's head before anything is read.
        await asyncio.to_thread(migrate.upgrade, self.url)
        self._engine = engine
        self._writer = Writer(migrate.sync_url(self.url), self._synchronous)
        self._writer.start()

    async def close(self) -> None:
        self._hand_over_turn()
        if self._writer is not None:
            # The writer commits what is queued before it stops: nothing accepted is dropped.
            await asyncio.to_thread(self._writer.stop)
            self._writer = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
        await self.objects.close()

    async def __aenter__(self) -> Store:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def batches(self) -> int:
        """Commits made by the writer, for metrics and benchmarks."""
        return self._writer.batches if self._writer is not None else 0

    # -- group commit -----------------------------------------------------------------

    @property
    def checkpoints(self) -> int:
        """SQLite checkpoints run off the commit path so far (0 on PostgreSQL)."""
        writer = self._writer
        return writer.checkpointer.checkpoints if writer and writer.checkpointer else 0

    def commit_wait(self) -> float:
        """Seconds a record queued now can expect to wait for its commit (0 when the
        writer is idle); a call whose deadline is nearer is turned away before it runs."""
        return self._writer.expected_wait() if self._writer is not None else 0.0

    def _running(self) -> Writer:
        if self._writer is None:
            raise StorageError("the store is not started")
        return self._writer

    async def commit(self, rows: Rows) -> None:
        """Insert `(table, values)` rows in the next batch; return once it is committed.
        Raises StorageError when these rows cannot be stored: the other callers of the
        batch are stored and answered all the same."""
        running = self._running()
        loop = asyncio.get_running_loop()
        turn = self._turn
        mine = _own(rows)
        # The first commit of this turn of the loop: with the writer idle, straight in, with
        # no hop at all; the calls that follow in the same turn share a batch.
        if turn is None and self._inline_turn is not loop:
            outcome = running.commit_inline([mine])
            if outcome is not None:
                self._inline_turn = loop
                loop.call_soon(self._end_inline_turn)
                if outcome[0] is not None:
                    raise outcome[0]
                return
        if turn is None or turn.loop is not loop:
            self._hand_over_turn()
            turn = self._turn = Pending([], loop)
            loop.call_soon(self._end_turn, turn)
        done: asyncio.Future[None] = loop.create_future()
        turn.parts.append((mine, done))
        await asyncio.shield(done)

    def _end_inline_turn(self) -> None:
        self._inline_turn = None

    def _end_turn(self, turn: Pending) -> None:
        """The loop's turn is over: commit its rows here when the writer can spare the
        trip (writer.py says when), else hand them to the writer's thread."""
        if self._turn is not turn:
            return  # handed over already, to keep the order of a later change
        self._turn = None
        assert self._writer is not None
        outcomes = self._writer.commit_inline([rows for rows, _done in turn.parts])
        if outcomes is None:
            self._submit_turn(turn)
            return
        for (_rows, done), error in zip(turn.parts, outcomes, strict=True):
            settle(done, None, error)

    def _hand_over_turn(self) -> None:
        # What the current turn asked for goes to the writer ahead of what comes next: the
        # writer keeps the order of what it is given.
        turn, self._turn = self._turn, None
        if turn is not None:
            self._submit_turn(turn)

    def _submit_turn(self, turn: Pending) -> None:
        try:
            self._running().submit(turn)
        except StorageError as exc:
            for _rows, done in turn.parts:
                settle(done, None, exc)

    def enqueue(self, rows: Rows) -> asyncio.Future[None]:
        """Queue `rows` for the next batch now; the future settles once they are committed.
        The writer keeps the order of what is queued: a change queued after this one sees
        these rows."""
        running = self._running()
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        running.submit(Pending([(_own(rows), done)], loop))
        return done

    async def commit_if(self, guard: Any, params: Mapping[str, Any], rows: Rows = ()) -> bool:
        """Run `guard` (an UPDATE) and, only if it changed exactly one row, insert `rows`,
        in one transaction of the writer; whether it changed one."""
        running = self._running()
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        running.submit(Guarded(guard, dict(params), _own(rows), done, loop))
        return await asyncio.shield(done)


def _own(rows: Rows) -> list[Row]:
    """The caller's rows, copied: what it changes after handing them over is not written."""
    return [(table, dict(values)) for table, values in rows]
