"""The store's group-commit writer, and SQLite's checkpointer beside it.

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

A batch is its callers' rows together, but one caller's bad row (a duplicate id, a value
the database refuses) must not fail the others: their side effects already ran, and a
result turned into a storage failure (its idempotency row lost with it) is run again on
retry. So a failed batch is written again with each caller's rows in a savepoint of its
own: the offending caller fails, the others are stored and answered. The happy path pays
nothing for this.

The thread's connection is opened again when the database drops it (a server restart):
a batch lost with the connection before its COMMIT was sent cannot have been stored (the
server rolls back a transaction whose session ends) and is written again once, on the new
connection; one lost while its COMMIT was under way may or may not be stored, so its
callers are failed rather than risk storing it twice.

SQLite's WAL is checkpointed by `Checkpointer`, a thread with a connection of its own, at a
quiet moment or once enough rows were committed since the last one, never inside a
commit (every gateway connection has `wal_autocheckpoint=0`): a checkpoint copies pages
into the database file and, with `FULL`, flushes it, which took a commit from 0.1 ms to
several ms when SQLite ran it in the committing connection. Its checkpoints are
`PASSIVE`: they never wait for, nor hold up, a writer or a reader.

The writer also says how long a record queued now can expect to wait for its commit
(`expected_wait`), so a call whose evidence could not be stored before its deadline can
be turned away before it runs (the pipeline does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, create_engine, event, insert, make_url

from gateway.errors import StorageError

log = logging.getLogger(__name__)

Row = tuple[Any, dict[str, Any]]

# The guess of a batch's commit time until one is measured, and the weight of the newest
# measure in the running averages (they follow a change of load within a few batches).
FIRST_GUESS_S = 0.005
RECENT_WEIGHT = 0.2
# The largest batch committed on the event loop's thread (SQLite, `NORMAL`, writer idle):
# a few rows commit in tens of microseconds; more are the thread's, in parallel with the
# loop. The calls that finish in one turn of the loop share one batch either way.
INLINE_MAX_ROWS = 8
# ... and the most text (characters of its string values, summed) it may hold: a few large
# records would keep the loop from every other call while SQLite copies them in.
INLINE_MAX_BYTES = 64 * 1024
# SQLite checkpoints: after this long without a commit, or once this many rows were
# committed since the last one (about 4 MB of evidence, SQLite's own automatic threshold).
CHECKPOINT_QUIET_S = 0.05
CHECKPOINT_ROWS = 4000
# A WAL that grew (a reader held an old snapshot while rows came in) is cut back to this
# once a checkpoint has emptied it.
WAL_SIZE_LIMIT = 16 * 1024 * 1024
# How long the writer's own connection waits for a lock another process holds, per try;
# the batch is tried again after it, never dropped while the store runs.
BUSY_TIMEOUT_MS = 5000
# Who the writer's PostgreSQL session is, in `pg_stat_activity`.
PG_APPLICATION_NAME = "gateway-evidence-writer"


# One caller's rows, and the future that settles once they are committed.
Part = tuple[list[Row], asyncio.Future[None]]


@dataclass
class Pending:
    """Rows to insert in the next batch, as `parts`: each is one caller's, and should the
    batch fail, each is stored or failed on its own."""

    parts: list[Part]
    loop: asyncio.AbstractEventLoop

    @property
    def count(self) -> int:
        return sum(len(rows) for rows, _done in self.parts)


@dataclass
class Guarded:
    """One conditional change: `rows` are written only if `guard` (an UPDATE) changed
    exactly one row, in one transaction; `done` answers whether it did."""

    guard: Any  # an UPDATE with bind parameters, built once
    params: dict[str, Any]
    rows: list[Row]
    done: asyncio.Future[bool]
    loop: asyncio.AbstractEventLoop

    @property
    def count(self) -> int:
        return len(self.rows)

    def settle(self, changed: bool | None, error: BaseException | None = None) -> None:
        _call_soon(self.loop, _settle_guarded, self.done, changed, error)


def _settle_guarded(
    done: asyncio.Future[bool], changed: bool | None, error: BaseException | None
) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(bool(changed))


def settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


def _settle_each(outcomes: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    for done, error in outcomes:
        settle(done, error)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    # A loop closed while its call waited has no one left to tell; the writer goes on.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _is_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked": another connection holds the write lock."""
    return isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorname", "") in (
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
    )


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


def _failure(exc: BaseException) -> StorageError:
    return StorageError(f"evidence could not be stored: {type(exc).__name__}")


def group(rows: Iterable[Row]) -> dict[tuple[Table, tuple[str, ...]], list[dict[str, Any]]]:
    """Rows by table and columns, each group one statement, in the order they came."""
    grouped: dict[tuple[Table, tuple[str, ...]], list[dict[str, Any]]] = {}
    for table, values in rows:
        grouped.setdefault((table, tuple(values)), []).append(values)
    return grouped


_STOP = object()


class Writer:
    """The group-commit thread: drain the queue, one transaction, settle every caller."""

    def __init__(self, url: str, synchronous: str | None) -> None:
        sqlite = make_url(url).get_backend_name() == "sqlite"
        self._engine = create_engine(
            url, connect_args={} if sqlite else {"application_name": PG_APPLICATION_NAME}
        )
        self.dialect = self._engine.dialect
        self._sqlite = sqlite
        if synchronous is not None:
            pragmas = sqlite_pragmas if sqlite else _pg_commit
            event.listen(self._engine, "connect", pragmas(synchronous))
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="evidence-writer", daemon=True)
        self._stopping = threading.Event()
        self._compiled: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...] | None]] = {}
        # Guard statements are module constants: compiled once, keyed by identity.
        self._guards: dict[int, tuple[str, tuple[str, ...] | None]] = {}
        self._copy = self.dialect.name == "postgresql"
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
        self.average_s = FIRST_GUESS_S  # a batch's commit, running average
        self.row_s = FIRST_GUESS_S  # a batch's commit per row, running average
        self.measured = 0
        self.batches = 0
        database = make_url(url).database if sqlite else None
        self._path = database if database and database != ":memory:" else None
        self.checkpointer = (
            Checkpointer(self._path, self._turn, quiet_s=CHECKPOINT_QUIET_S, rows=CHECKPOINT_ROWS)
            if self._path is not None
            else None
        )
        # Commits on the loop's thread: only where a commit is a few page writes in process.
        self.inline = self._path is not None and (synchronous or "FULL") in ("OFF", "NORMAL")
        self._synchronous = synchronous or "FULL"
        self._inline_conn: sqlite3.Connection | None = None
        # The thread's connection (a pool's proxy of it); None until (re)opened.
        self._raw: Any | None = None
        self.reconnects = 0

    def start(self) -> None:
        self._thread.start()
        if self.checkpointer is not None:
            self.checkpointer.start()

    def submit(self, item: Pending | Guarded) -> None:
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
        """Seconds a record handed over now can expect to wait for its commit: what is
        left of the batch under way (its average, or as long again as it has taken when
        it is past that: a stalled commit is not near its end), then a batch with every
        row queued ahead of it. Nothing when the writer is idle."""
        started, queued = self._batch_started, self._queued_rows
        if started is None and queued <= 0:
            return 0.0
        wait = self.average_s + queued * self.row_s
        if started is not None:
            elapsed = time.monotonic() - started
            wait += max(self.average_s - elapsed, elapsed)
        return wait

    def _measured(self, seconds: float, rows: int) -> None:
        if self.measured == 0:
            self.average_s, self.row_s = seconds, seconds / max(rows, 1)
        else:
            self.average_s += RECENT_WEIGHT * (seconds - self.average_s)
            self.row_s += RECENT_WEIGHT * (seconds / max(rows, 1) - self.row_s)
        self.measured += 1

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
            isolated = False
            while True:
                try:
                    outcomes = self._write(conn, parts, isolated=isolated)
                    conn.commit()
                    break
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                    if _is_busy(exc):
                        return None  # someone else holds the lock: the thread waits for it
                    if isolated or len(parts) == 1:
                        return [_failure(exc) for _part in parts]
                    isolated = True  # the failing caller's rows, told from the others'
            rows = sum(len(part) for part in parts)
            self._measured(time.monotonic() - started, rows)
            self.batches += 1
        finally:
            self._turn.release()
        if self.checkpointer is not None:
            self.checkpointer.committed(rows)
        return outcomes

    def _connect_inline(self) -> sqlite3.Connection | None:
        """The loop's own connection, or None for now when the database is locked. The
        database is in WAL mode already (the thread's connection set it, and it stays)."""
        assert self._path is not None
        # Shared between threads only under `_turn`; never waits for a lock.
        conn = sqlite3.connect(self._path, timeout=0, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        except sqlite3.Error:
            conn.close()
            return None
        self._inline_conn = conn
        return conn

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        # Opened now so the first batch does not wait for it; a failure is the next
        # batch's to report (and to try again).
        try:
            self._connection()
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
            if self._raw is not None:
                with contextlib.suppress(Exception):
                    self._raw.close()
                self._raw = None

    def _connection(self) -> Any:
        """The thread's connection, opened again after the last one was lost. The DBAPI
        connection directly: the statements are SQLAlchemy Core, compiled once per table
        for this dialect, but each batch skips the per-execute machinery."""
        if self._raw is None:
            raw = self._engine.raw_connection()
            # Whatever the engine read on connecting ends here: a read left open would
            # keep the WAL from ever starting over.
            raw.rollback()
            self._raw = raw
        return self._raw

    def _lost(self, raw: Any, exc: BaseException) -> bool:
        """Whether `exc` means the connection is gone; if so it is dropped, and the next
        use opens a new one."""
        dbapi_error = self.dialect.loaded_dbapi.Error
        if not isinstance(exc, dbapi_error):
            return False
        if not self.dialect.is_disconnect(exc, raw.dbapi_connection, None):
            return False
        log.warning("the evidence writer lost its connection: %r", exc)
        with contextlib.suppress(Exception):
            raw.invalidate(exc)
        self._raw = None
        self.reconnects += 1
        return True

    def _statement(self, table: Table, keys: tuple[str, ...]) -> tuple[str, tuple[str, ...] | None]:
        cached = self._compiled.get((table.name, keys))
        if cached is None:
            compiled = insert(table).compile(dialect=self.dialect, column_keys=list(keys))
            order = tuple(compiled.positiontup) if compiled.positiontup else None
            cached = self._compiled[(table.name, keys)] = (str(compiled), order)
        return cached

    def _copy_statement(self, table: Table, keys: tuple[str, ...]) -> str:
        cached = self._compiled.get((f"copy {table.name}", keys))
        if cached is None:
            quote = self.dialect.identifier_preparer
            columns = ", ".join(quote.quote(key) for key in keys)
            sql = f"COPY {quote.format_table(table)} ({columns}) FROM STDIN"
            cached = self._compiled[(f"copy {table.name}", keys)] = (sql, keys)
        return cached[0]

    def _insert(
        self, cursor: Any, grouped: dict[tuple[Table, tuple[str, ...]], list[dict[str, Any]]]
    ) -> None:
        for (table, keys), values_list in grouped.items():
            if self._copy and len(values_list) > 1:
                with cursor.copy(self._copy_statement(table, keys)) as copy:
                    for values in values_list:
                        copy.write_row(tuple(values[k] for k in keys))
                continue
            sql, order = self._statement(table, keys)
            params = (
                [tuple(v[k] for k in order) for v in values_list]
                if order is not None
                else values_list
            )
            if len(params) == 1:
                cursor.execute(sql, params[0])
            else:
                cursor.executemany(sql, params)

    def _write(
        self, conn: Any, parts: Sequence[Sequence[Row]], *, isolated: bool
    ) -> list[StorageError | None]:
        """Insert `parts` in the open transaction, not committed. At once, or (`isolated`)
        each part in a savepoint of its own: a part that fails is rolled back alone and
        reported, the others stay. Raises what fails the transaction as a whole."""
        cursor = conn.cursor()
        try:
            if not isolated:
                self._insert(cursor, group(row for part in parts for row in part))
                return [None] * len(parts)
            if self._sqlite:
                # Python's sqlite3 opens a transaction only before an INSERT: the first
                # SAVEPOINT would open one instead, and its RELEASE commit it.
                cursor.execute("BEGIN")
            outcomes: list[StorageError | None] = []
            for part in parts:
                cursor.execute("SAVEPOINT evidence_part")
                try:
                    self._insert(cursor, group(part))
                except Exception as exc:
                    if _is_busy(exc):
                        raise  # the whole batch waits for the lock, not this part
                    # On a lost connection this fails too, and the whole batch with it.
                    cursor.execute("ROLLBACK TO SAVEPOINT evidence_part")
                    outcomes.append(_failure(exc))
                else:
                    outcomes.append(None)
                cursor.execute("RELEASE SAVEPOINT evidence_part")
            return outcomes
        finally:
            cursor.close()

    def _store(self, parts: Sequence[Sequence[Row]]) -> list[StorageError | None]:
        """Commit `parts` (each one caller's rows) on the thread's connection: at once, or
        when that fails, each part on its own. What became of each part."""
        isolated = False
        reconnected = False
        while True:
            try:
                raw = self._connection()
            except Exception as exc:
                log.warning("the evidence writer could not connect: %r", exc)
                return [_failure(exc) for _part in parts]
            try:
                outcomes = self._write(raw, parts, isolated=isolated)
            except Exception as exc:
                with contextlib.suppress(Exception):
                    raw.rollback()
                if _is_busy(exc) and not self._stopping.is_set():
                    # Someone else holds the database's lock longer than the busy timeout:
                    # what was accepted waits for it (new calls are turned away meanwhile).
                    continue
                if self._lost(raw, exc):
                    # Lost before COMMIT was sent: the server rolled the transaction back
                    # with its session, so nothing of it is stored. Once more, on a new
                    # connection (a second loss fails the batch: the database is down).
                    if reconnected:
                        return [_failure(exc) for _part in parts]
                    reconnected = True
                    continue
                if not isolated and len(parts) > 1:
                    isolated = True  # the failing caller's rows, told from the others'
                    continue
                return [_failure(exc) for _part in parts]
            try:
                raw.commit()
            except Exception as exc:
                with contextlib.suppress(Exception):
                    raw.rollback()
                if _is_busy(exc) and not self._stopping.is_set():
                    continue  # nothing was stored: as for a lock held during the inserts
                # Lost while COMMIT was under way (`_lost` drops the connection for the
                # next batch): it may or may not have been stored, and writing it again
                # could store it twice, so its callers fail. Anything else failing a COMMIT
                # left nothing stored either.
                self._lost(raw, exc)
                return [_failure(exc) for _part in parts]
            return outcomes

    def _commit(self, batch: list[Pending]) -> None:
        started = time.monotonic()
        outcomes = iter(self._store([rows for p in batch for rows, _done in p.parts]))
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
            self._measured(time.monotonic() - started, stored)
            self.batches += 1
            if self.checkpointer is not None:
                self.checkpointer.committed(stored)
        # One wake-up per event loop for the whole batch.
        for loop, settled in by_loop.items():
            _call_soon(loop, _settle_each, settled)

    def _change(self, change: Guarded) -> None:
        cached = self._guards.get(id(change.guard))
        if cached is None:
            compiled = change.guard.compile(dialect=self.dialect)
            order = tuple(compiled.positiontup) if compiled.positiontup else None
            cached = self._guards[id(change.guard)] = (str(compiled), order)
        sql, order = cached
        params = tuple(change.params[k] for k in order) if order is not None else change.params
        reconnected = False
        while True:
            committing = False
            try:
                raw = self._connection()
                cursor = raw.cursor()
                try:
                    cursor.execute(sql, params)
                    changed = cursor.rowcount == 1
                    if changed:
                        self._insert(cursor, group(change.rows))
                        committing = True
                        raw.commit()
                    else:
                        raw.rollback()
                finally:
                    cursor.close()
            except Exception as exc:
                if self._raw is not None:
                    with contextlib.suppress(Exception):
                        self._raw.rollback()
                    # As for a batch: a change lost before its COMMIT was sent is not
                    # stored, and is tried once more on a new connection.
                    if self._lost(self._raw, exc) and not committing and not reconnected:
                        reconnected = True
                        continue
                change.settle(None, StorageError(f"the change could not be stored: {exc}"))
                return
            break
        if changed and self.checkpointer is not None:
            self.checkpointer.committed(len(change.rows) + 1)
        change.settle(changed)


class Checkpointer:
    """Copies SQLite's WAL into the database file from a thread and connection of its own:
    once no commit came for `quiet_s`, or once `rows` were committed since the last time,
    whichever is first. `PASSIVE`: it copies what no reader still needs and waits for no
    one, and the copy goes on while commits append to the WAL.

    The WAL file is used again from its start only once every frame is copied and no one
    is in the middle of a commit, which commits arriving all the time never let happen
    (measured: a gateway writing without a pause had a 26 MB WAL for 10 MB of rows). So a
    second pass, holding the writer's `turn`, copies what came during the first and starts
    the WAL over (`RESTART`, which waits for no reader: with one in the WAL it leaves the
    start for next time). Commits of this process wait for that second pass only; the
    first, which copies the bulk, waits for nobody and no one waits for it."""

    def __init__(self, path: str, turn: threading.Lock, *, quiet_s: float, rows: int) -> None:
        self.path = path
        self._turn = turn
        self.quiet_s = quiet_s
        self.rows = rows
        self.checkpoints = 0
        # What the last checkpoint found: frames in the WAL, and frames copied.
        self.last: tuple[int, int] | None = None
        self._dirty = threading.Event()
        self._stopping = False
        # Rows since the last checkpoint; counted by the committing threads and reset by
        # this one without a lock: an estimate is all a threshold needs.
        self._since = 0
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._dirty.set()
        self._thread.join()

    def committed(self, rows: int) -> None:
        self._since += rows
        self._dirty.set()

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, timeout=0, check_same_thread=False)
        try:
            while True:
                self._dirty.wait()
                # Wait for a quiet moment, unless enough rows piled up meanwhile.
                while not self._stopping and self._since < self.rows:
                    self._dirty.clear()
                    if not self._dirty.wait(self.quiet_s):
                        break
                if self._stopping:
                    return
                self._dirty.clear()
                self._since = 0
                self.checkpoint(conn)
                # The tail, and the WAL started over: this process's commits hold still
                # for as long as it takes to copy what came during the first pass.
                with self._turn:
                    self.checkpoint(conn, "RESTART")
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection, mode: str = "PASSIVE") -> bool:
        """One checkpoint; whether it copied every frame of the WAL (a failed one counts
        as done: the next commit brings the next try). `RESTART`, with the writer's turn
        held, also starts the WAL over itself when no reader is in it; this connection
        waits for no one (`busy_timeout` 0), so it is as short as the `PASSIVE` one."""
        try:
            [(_busy, frames, copied)] = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        except sqlite3.Error as exc:
            log.warning("SQLite checkpoint failed: %r", exc)
            return True
        self.last = (int(frames), int(copied))
        self.checkpoints += 1
        return int(copied) >= int(frames)


def _pg_commit(synchronous: str) -> Any:
    """PostgreSQL's commit waits for its WAL flush unless told otherwise (`OFF`, `NORMAL`:
    the writer's commits are asynchronous, lost only if the database server itself stops
    within a fraction of a second, as SQLite's `NORMAL` loses them only to a power cut)."""
    setting = "on" if synchronous in ("FULL", "EXTRA") else "off"

    def apply(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SET synchronous_commit = {setting}")
        cur.close()
        dbapi_conn.commit()

    return apply


def sqlite_pragmas(synchronous: str, *, busy_timeout_ms: int | None = None) -> Any:
    """Every gateway connection to SQLite: WAL, the commit mode, and no checkpoint inside
    a commit (the `Checkpointer` runs them)."""
    busy_ms = BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms

    def apply(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        cur.close()

    return apply
