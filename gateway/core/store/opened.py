"""The store's open form: its read engine and its group-commit writer, both there from the
moment it is open to its close, and the turn of the event loop that groups a batch.

`OpenStore.open(config)` makes the data dir, brings the schema to this release's head
(Alembic's), then opens the engine and starts the writer; `close` commits what is queued
and lets both go. Nothing here is ever half open: `Store` (database.py) holds one of these
while it is open, and refuses, in one place, when it is not.

The records asked for in one turn of the event loop form one batch (the calls that finish
together share a commit even when the writer is idle), handed to the writer once the turn
is over. The writer is one thread with a plain (sync) connection: an async engine costs
about 0.6 ms per commit in thread hops on SQLite, and one writer is all SQLite allows at a
time anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.core.errors import StorageError
from gateway.core.private_files import private_dir, private_file
from gateway.core.store import migrate, sqlite, writer
from gateway.core.store.batch import Guarded, Pending
from gateway.core.store.commit import settle
from gateway.core.store.config import StoreConfig
from gateway.core.store.repository import Rows
from gateway.core.store.statements import Row
from gateway.core.store.writer import Writer


class OpenStore:
    """An open store: the engine its repositories read with, and the writer they commit
    through, in the order they were given."""

    def __init__(self, engine: AsyncEngine, writer: Writer) -> None:
        self.engine = engine
        self.writer = writer
        self._turn: Pending | None = None  # the rows asked for in this turn of the loop
        # The loop whose current turn already committed on its own thread.
        self._inline_turn: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def open(cls, config: StoreConfig) -> OpenStore:
        url, synchronous = config.url, config.synchronous.upper()
        private_dir(config.data_dir)
        private_dir(config.data_dir / "artifacts")
        engine = create_async_engine(url)
        if url.startswith("sqlite"):
            # SQLite gives its -wal and -shm files the database file's mode.
            for path in sqlite.database_files(url):
                if path.exists() or path.name.endswith(".db"):
                    private_file(path)
            # The reads wait for a lock as long as the writer does.
            pragmas = sqlite.pragmas(synchronous, busy_timeout_ms=writer.BUSY_TIMEOUT_MS)
            event.listen(engine.sync_engine, "connect", pragmas)
        # The schema is Alembic's: brought to this release's head before anything is read.
        await asyncio.to_thread(migrate.upgrade, url)
        return cls(engine, Writer(migrate.sync_url(url), synchronous))

    async def close(self) -> None:
        self._hand_over_turn()
        # The writer commits what is queued before it stops: nothing accepted is dropped.
        await asyncio.to_thread(self.writer.stop)
        await self.engine.dispose()

    # -- what the writer has done, and can be expected to do -------------------------------

    @property
    def batches(self) -> int:
        """Commits made by the writer, for metrics and benchmarks."""
        return self.writer.batches

    @property
    def checkpoints(self) -> int:
        """SQLite checkpoints run off the commit path so far (0 on PostgreSQL)."""
        checkpointer = self.writer.checkpointer
        return checkpointer.checkpoints if checkpointer is not None else 0

    def commit_wait(self) -> float:
        """Seconds a record queued now can expect to wait for its commit (0 when the
        writer is idle); a call whose deadline is nearer is turned away before it runs."""
        return self.writer.expected_wait()

    # -- group commit -----------------------------------------------------------------

    async def commit(self, rows: Rows) -> None:
        """Insert `(table, values)` rows in the next batch; return once it is committed.
        Raises StorageError when these rows cannot be stored: the other callers of the
        batch are stored and answered all the same."""
        loop = asyncio.get_running_loop()
        turn = self._turn
        mine = _own(rows)
        # The first commit of this turn of the loop: with the writer idle, straight in, with
        # no hop at all; the calls that follow in the same turn share a batch.
        if turn is None and self._inline_turn is not loop:
            outcome = self.writer.commit_inline([mine])
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
        outcomes = self.writer.commit_inline([rows for rows, _done in turn.parts])
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
            self.writer.submit(turn)
        except StorageError as exc:
            for _rows, done in turn.parts:
                settle(done, None, exc)

    def enqueue(self, rows: Rows) -> asyncio.Future[None]:
        """Queue `rows` for the next batch now; the future settles once they are committed.
        The writer keeps the order of what is queued: a change queued after this one sees
        these rows."""
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.writer.submit(Pending([(_own(rows), done)], loop))
        return done

    async def commit_if(self, guard: Any, params: Mapping[str, Any], rows: Rows = ()) -> bool:
        """Run `guard` (an UPDATE) and, only if it changed exactly one row, insert `rows`,
        in one transaction of the writer; whether it changed one."""
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self.writer.submit(Guarded(guard, dict(params), _own(rows), done, loop))
        return await asyncio.shield(done)


def _own(rows: Rows) -> list[Row]:
    """The caller's rows, copied: what it changes after handing them over is not written."""
    return [(table, dict(values)) for table, values in rows]
