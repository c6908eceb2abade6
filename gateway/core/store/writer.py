"""The store's group-commit writer.

Evidence of a call must be durable before its result is returned, but one transaction per
call caps throughput at the database's commit rate. The writer takes every record queued
while the previous transaction was committing and writes them in one transaction; each
caller's future settles once the batch holding its rows is committed, so nothing is
acknowledged before it is stored, and concurrent calls share one commit.

How a batch reaches the database, measured with bench/store.py and bench/core.py:

- On PostgreSQL a batch's rows of one table go as one `COPY ... FROM STDIN`: psycopg's
  `executemany` sends each row as its own statement (in pipeline mode, still one bind and
  execute per row), which took twice the client CPU and 1.5x the time of a COPY for 64
  evidence rows; a multi-row `INSERT ... VALUES` of 64 rows was slower than either (its
  768 parameters adapted one by one).
- On SQLite, with `synchronous=NORMAL` (no disk flush per commit), a small batch found
  with the writer idle is committed on the event loop's own thread: the two thread hops
  of the writer (wake it, then wake the loop back) cost more than the commit itself. It
  has a connection of its own that never waits for a lock (`busy_timeout=0`): a database
  locked by someone else sends the batch to the thread, which waits, so the loop never
  does. With `FULL`, on PostgreSQL, or for a large batch, the thread commits while the
  loop goes on with other calls.
- The thread settles a batch's callers with one wake-up of their event loop, not one each.

What a failed commit does (a lock held by someone else, a lost connection, one caller's
bad row) is the store's one commit policy, `gateway/core/store/commit.py`, the same for the
thread's batches, the loop's and the guarded changes. SQLite's WAL is checkpointed off the
commit path by `Checkpointer` (gateway/core/store/checkpointer.py).

The writer is open from its construction (its thread running) until `stop`; what it is
handed is `batch.py`'s, and it says how long a record queued now can expect to wait for its
commit (`expected_wait`, on `pace.py`'s averages), so a call whose evidence could not be
stored before its deadline can be turned away before it runs (the pipeline does).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import create_engine, event, make_url

from gateway.core.errors import StorageError
from gateway.core.store import postgres, sqlite
from gateway.core.store.batch import Guarded, Pending
from gateway.core.store.checkpointer import Checkpointer
from gateway.core.store.commit import (
    Busy,
    Fixed,
    GaveWay,
    Reconnecting,
    attempt,
    call_soon,
    failure,
    settle_each,
    write_parts,
)
from gateway.core.store.pace import CommitPace
from gateway.core.store.statements import Row, Statements, group

log = logging.getLogger(__name__)

# The largest batch committed on the event loop's thread (SQLite, `NORMAL`, writer idle):
# a few rows commit in tens of microseconds; more are the thread's, in parallel with the
# loop. The calls that finish in one turn of the loop share one batch either way.
INLINE_MAX_ROWS = 8
# ... and the most text (characters of its string values, summed) it may hold: a few large
# records would keep the loop from every other call while SQLite copies them in.
INLINE_MAX_BYTES = 64 * 1024
# SQLite checkpoints: after a whole window this long without a commit, or once this many
# rows were committed since the last one (about 4 MB of evidence, SQLite's own automatic
# threshold).
CHECKPOINT_QUIET_S = 0.05
CHECKPOINT_ROWS = 4000
# How long the writer's own connection waits for a lock another process holds, per try;
# the batch is tried again after it, never dropped while the store runs.
BUSY_TIMEOUT_MS = 5000
# Who the writer's PostgreSQL session is, in `pg_stat_activity`.
PG_APPLICATION_NAME = "gateway-evidence-writer"


def _too_large_inline(parts: Sequence[Sequence[Row]]) -> bool:
    """More rows, or more text, than a commit on the event loop's thread may take."""
    rows = sum(len(part) for part in parts)
    if rows > INLINE_MAX_ROWS:
        return True
    size = 0
    for part in parts:
        for _table, values in part:
            for value in values.values():
                if isinstance(value, str | bytes):
                    size += len(value)
    return size > INLINE_MAX_BYTES


_STOP = object()


class Writer:
    """The group-commit thread: drain the queue, one transaction, settle every caller.

    Running once built, until `stop`: there is no writer that is not yet started."""

    def __init__(self, url: str, synchronous: str | None) -> None:
        is_sqlite = make_url(url).get_backend_name() == "sqlite"
        self._engine = create_engine(
            url, connect_args={} if is_sqlite else {"application_name": PG_APPLICATION_NAME}
        )
        self.dialect = self._engine.dialect
        if synchronous is not None:
            event.listen(
                self._engine,
                "connect",
                sqlite.pragmas(synchronous, busy_timeout_ms=BUSY_TIMEOUT_MS)
                if is_sqlite
                else postgres.commit_mode(synchronous),
            )
        self._statements = Statements(self.dialect)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="evidence-writer", daemon=True)
        self._stopping = threading.Event()
        # The database's write turn: the thread's batch, a commit on the loop's thread, or
        # the end of a checkpoint that commits kept from finishing.
        self._turn = threading.Lock()
        # Items handed to the thread and not yet through it (each counter has one writer:
        # `_submitted` the callers, under `_count`; `_finished` the thread).
        self._count = threading.Lock()
        self._submitted = 0
        self._finished = 0
        self._queued_rows = 0  # rows handed over and not yet taken into a batch
        self._batch_started: float | None = None  # time.monotonic() of the batch under way
        self.pace = CommitPace()
        self.batches = 0
        self._path = sqlite.database_path(url)
        self._synchronous = synchronous or "FULL"
        self.checkpointer = (
            Checkpointer(
                self._path,
                self._turn,
                self._synchronous,
                quiet_s=CHECKPOINT_QUIET_S,
                rows=CHECKPOINT_ROWS,
            )
            if self._path is not None
            else None
        )
        # Commits on the loop's thread: only where a commit is a few page writes in process.
        self.inline = self._path is not None and self._synchronous in ("OFF", "NORMAL")
        self._inline_conn: Any | None = None  # a sqlite3 connection, once opened
        self._inline_link = Fixed(lambda: self._inline_conn)
        # The thread's connection, opened again when the database drops it.
        self._link = Reconnecting(self._engine)
        self._thread.start()
        if self.checkpointer is not None:
            self.checkpointer.start()

    def _running(self) -> bool:
        return not self._stopping.is_set()

    @property
    def reconnects(self) -> int:
        return self._link.reconnects

    def submit(self, item: Pending | Guarded) -> None:
        # A thread that ended (stopped, or failed) would leave the item's callers waiting.
        if not self._thread.is_alive():
            raise StorageError("the evidence writer is not running")
        with self._count:
            self._submitted += 1
            self._queued_rows += item.count
        self._queue.put(item)

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put(_STOP)
        self._thread.join()
        # The loop may be in the middle of an inline commit (stop runs on a worker thread):
        # the connection is closed only between commits, and none is made after.
        with self._turn:
            self.inline = False
            conn, self._inline_conn = self._inline_conn, None
            if conn is not None:
                conn.close()
        if self.checkpointer is not None:
            self.checkpointer.stop()
        self._engine.dispose()

    # -- what a caller can expect -------------------------------------------------------

    def expected_wait(self) -> float:
        """Seconds a record handed over now can expect to wait for its commit (pace.py)."""
        return self.pace.expected_wait(self._batch_started, self._queued_rows)

    def _committed(self, rows: int, started: float | None = None) -> None:
        """A transaction of `rows` was committed: measured (a batch, from `started`), and
        counted towards the next checkpoint."""
        if started is not None:
            self.pace.measure(time.monotonic() - started, rows)
            self.batches += 1
        if self.checkpointer is not None:
            self.checkpointer.committed(rows)

    # -- on the caller's thread ----------------------------------------------------------

    def commit_inline(self, parts: Sequence[Sequence[Row]]) -> list[StorageError | None] | None:
        """Commit `parts` (each one caller's rows) now, on this thread, when the writer is
        idle and the batch small; None (nothing written) when they are the thread's to
        commit. Otherwise what became of each part: None when stored, else why not."""
        if not self.inline or _too_large_inline(parts):
            return None
        if not self._turn.acquire(blocking=False):
            return None
        try:
            # Anything handed to the thread and not yet committed goes first: the order
            # of what is queued is kept. A stopped writer commits nothing more.
            if not self.inline or self._submitted != self._finished:
                return None
            conn = self._inline_conn or self._connect_inline()
            if conn is None:
                return None
            started = time.monotonic()
            try:
                # Someone else holding the lock gives the batch to the thread, which waits.
                outcomes, committed = self._attempt(self._inline_link, parts, Busy.GIVE_WAY)
            except GaveWay:
                return None
            if committed:
                self._committed(sum(len(part) for part in parts), started)
        finally:
            self._turn.release()
        return outcomes

    def _connect_inline(self) -> Any | None:
        """The loop's own connection (shared between threads only under `_turn`), or None
        for now when the database is locked."""
        assert self._path is not None
        try:
            self._inline_conn = sqlite.connect(self._path, self._synchronous)
        except sqlite3.Error:
            return None
        return self._inline_conn

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        # Opened now so the first batch does not wait for it; a failure is the next
        # batch's to report (and to try again).
        try:
            self._link.connection()
        except Exception as exc:
            log.warning("the evidence writer could not connect: %r", exc)
        try:
            stopping = False
            while not stopping:
                batch: list[Pending] = []
                guarded: list[Guarded] = []
                item = self._queue.get()
                with self._turn:
                    rows = 0
                    while True:
                        if item is _STOP:
                            stopping = True
                        elif isinstance(item, Guarded):
                            guarded.append(item)
                            rows += item.count
                        else:
                            batch.append(item)
                            rows += item.count
                        try:
                            item = self._queue.get_nowait()
                        except queue.Empty:
                            break
                    with self._count:
                        self._queued_rows -= rows
                    self._batch_started = time.monotonic()
                    try:
                        if batch:
                            self._commit(batch)
                        for change in guarded:
                            self._change(change)
                    finally:
                        self._batch_started = None
                        self._finished += len(batch) + len(guarded)
        finally:
            self._link.close()

    def _attempt(
        self, link: Any, parts: Sequence[Sequence[Row]], busy: Busy
    ) -> tuple[list[StorageError | None], bool]:
        """Commit `parts` (each one caller's rows) at once, or when that fails, each part
        on its own: what became of each part, and whether a transaction was committed."""

        def work(conn: Any, isolated: bool) -> tuple[list[StorageError | None], bool]:
            return write_parts(self._statements, conn, parts, isolated=isolated), True

        def fail(exc: BaseException) -> tuple[list[StorageError | None], bool]:
            return [failure(exc) for _part in parts], False

        return attempt(
            link,
            work,
            fail=fail,
            busy=busy,
            waiting=self._running,
            isolate=len(parts) > 1,
        )

    def _commit(self, batch: list[Pending]) -> None:
        started = time.monotonic()
        parts = [rows for p in batch for rows, _done in p.parts]
        outcomes = iter(self._attempt(self._link, parts, Busy.WAIT)[0])
        stored, committed = 0, False
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[None], Any]]] = {}
        for pending in batch:
            settled = by_loop.setdefault(pending.loop, [])
            for rows, done in pending.parts:
                error = next(outcomes)
                settled.append((done, error))
                if error is None:
                    stored, committed = stored + len(rows), True
        if committed:
            self._committed(stored, started)
        # One wake-up per event loop for the whole batch.
        for loop, settled in by_loop.items():
            call_soon(loop, settle_each, settled)

    def _change(self, change: Guarded) -> None:
        sql, params = self._statements.guard(change.guard, change.params)

        def work(conn: Any, _isolated: bool) -> bool:
            cursor = conn.cursor()
            try:
                cursor.execute(sql, params)
                if cursor.rowcount != 1:
                    conn.rollback()  # nothing to commit
                    return False
                self._statements.insert(cursor, group(change.rows))
                return True
            finally:
                cursor.close()

        # A lock held past the busy timeout fails the change (its caller is told, and may
        # ask again), where accepted evidence waits for it.
        try:
            changed = attempt(self._link, work, fail=_change_failed, busy=Busy.FAIL)
        except StorageError as exc:
            change.settle(False, exc)
            return
        if changed:
            self._committed(len(change.rows) + 1)
        change.settle(changed)


def _change_failed(exc: BaseException) -> bool:
    raise StorageError(f"the change could not be stored: {exc}") from exc
