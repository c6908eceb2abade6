"""The store's one commit policy: how a transaction is tried, and tried again, on a
connection that may be locked by someone else, drop, or refuse one caller's rows.

`attempt(link, work, ...)` opens the link's connection, runs `work` in a transaction and
commits it. What it does when that fails is the same for a batch the writer's thread
commits, for one the event loop commits itself, and for a guarded change:

- The database is locked by someone else (SQLite's busy timeout ran out): the
  transaction is tried again while the writer runs (`Busy.WAIT`: what was accepted waits
  for the lock, new calls are turned away meanwhile); handed to someone who may wait
  (`Busy.GIVE_WAY`, raising `GaveWay`); or failed (`Busy.FAIL`).
- The connection is lost before COMMIT was sent: the server rolled the transaction back
  with its session, so nothing of it is stored; it is tried once more on a new connection
  (a second loss fails it: the database is down).
- The connection is lost while COMMIT was under way: the transaction may or may not be
  stored, and writing it again could store it twice, so it fails. Anything else failing
  a COMMIT left nothing stored either.
- Anything else (a duplicate id, a value the database refuses) with several callers'
  rows in the transaction (`isolate`): written again with each caller's rows in a
  savepoint of its own (`write_parts`), so the offending caller fails and the others are
  stored. The happy path pays nothing for this.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.core.errors import StorageError
from gateway.core.store.sqlite import is_busy
from gateway.core.store.statements import Row, Statements, group

log = logging.getLogger(__name__)

T = TypeVar("T")


class Busy(enum.Enum):
    """What a transaction does when the database is locked by someone else."""

    WAIT = "wait"
    GIVE_WAY = "give way"
    FAIL = "fail"


class GaveWay(Exception):
    """The database was locked, and the transaction is someone else's to commit."""


class Link(Protocol):
    """A connection the policy may open again."""

    def connection(self) -> Any: ...

    def lost(self, conn: Any, exc: BaseException) -> bool:
        """Whether `exc` means `conn` is gone; if so the next `connection()` opens another."""
        ...


class Fixed:
    """A connection that is never opened again (SQLite in process: it cannot drop), as
    `current()` gives it."""

    def __init__(self, current: Callable[[], Any]) -> None:
        self.connection = current

    def lost(self, conn: Any, exc: BaseException) -> bool:
        return False


class Reconnecting:
    """A SQLAlchemy engine's DBAPI connection, opened on first use and again after the
    database dropped it (a server restart)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.dialect = engine.dialect
        self.current: Any | None = None  # a pool's proxy of the connection; None until opened
        self.reconnects = 0

    def connection(self) -> Any:
        if self.current is None:
            raw = self._engine.raw_connection()
            # Whatever the engine read on connecting ends here: a read left open would
            # keep the WAL from ever starting over.
            raw.rollback()
            self.current = raw
        return self.current

    def lost(self, conn: Any, exc: BaseException) -> bool:
        if not isinstance(exc, self.dialect.loaded_dbapi.Error):
            return False
        if not self.dialect.is_disconnect(exc, conn.dbapi_connection, None):
            return False
        log.warning("the evidence writer lost its connection: %r", exc)
        with contextlib.suppress(Exception):
            conn.invalidate(exc)
        self.current = None
        self.reconnects += 1
        return True

    def close(self) -> None:
        if self.current is not None:
            with contextlib.suppress(Exception):
                self.current.close()
            self.current = None


def attempt(
    link: Link,
    work: Callable[[Any, bool], T],
    *,
    fail: Callable[[BaseException], T],
    busy: Busy,
    waiting: Callable[[], bool] = lambda: True,
    isolate: bool = False,
) -> T:
    """Run `work(conn, isolated)` in a transaction on the link's connection and commit it;
    what `work` returned, or `fail(exc)` for what could not be stored. `isolated` is True
    on the try after a failure when `isolate` allows it. With `Busy.WAIT`, a locked
    database is waited for only while `waiting()`."""
    isolated = False
    reconnected = False
    while True:
        try:
            conn = link.connection()
        except Exception as exc:
            log.warning("the evidence writer could not connect: %r", exc)
            return fail(exc)
        try:
            outcome = work(conn, isolated)
        except Exception as exc:
            _rollback(conn)
            if _locked(exc, busy, waiting):
                continue
            if link.lost(conn, exc):
                if reconnected:
                    return fail(exc)
                reconnected = True
                continue
            if isolate and not isolated:
                isolated = True  # the failing caller's rows, told from the others'
                continue
            return fail(exc)
        try:
            conn.commit()
        except Exception as exc:
            _rollback(conn)
            if _locked(exc, busy, waiting):
                continue  # nothing was stored: as for a lock held during the work
            link.lost(conn, exc)  # dropped for the next try; this one fails
            return fail(exc)
        return outcome


def _locked(exc: BaseException, busy: Busy, waiting: Callable[[], bool]) -> bool:
    """Whether to try again for a locked database; raises GaveWay if it is not ours to."""
    if not is_busy(exc) or busy is Busy.FAIL:
        return False
    if busy is Busy.GIVE_WAY:
        raise GaveWay from exc
    return waiting()


def _rollback(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.rollback()


def failure(exc: BaseException) -> StorageError:
    return StorageError(f"evidence could not be stored: {type(exc).__name__}")


def write_parts(
    statements: Statements, conn: Any, parts: Sequence[Sequence[Row]], *, isolated: bool
) -> list[StorageError | None]:
    """Insert `parts` (each one caller's rows) in the open transaction, not committed. At
    once, or (`isolated`) each part in a savepoint of its own: a part that fails is rolled
    back alone and reported, the others stay. Raises what fails the transaction as a
    whole."""
    cursor = conn.cursor()
    try:
        if not isolated:
            statements.insert(cursor, group(row for part in parts for row in part))
            return [None] * len(parts)
        if statements.dialect.name == "sqlite":
            # Python's sqlite3 opens a transaction only before an INSERT: the first
            # SAVEPOINT would open one instead, and its RELEASE commit it.
            cursor.execute("BEGIN")
        outcomes: list[StorageError | None] = []
        for part in parts:
            cursor.execute("SAVEPOINT evidence_part")
            try:
                statements.insert(cursor, group(part))
            except Exception as exc:
                if is_busy(exc):
                    raise  # the whole batch waits for the lock, not this part
                # On a lost connection this fails too, and the whole batch with it.
                cursor.execute("ROLLBACK TO SAVEPOINT evidence_part")
                outcomes.append(failure(exc))
            else:
                outcomes.append(None)
            cursor.execute("RELEASE SAVEPOINT evidence_part")
        return outcomes
    finally:
        cursor.close()


def settle(done: asyncio.Future[T], value: T, error: BaseException | None = None) -> None:
    """Answer a caller: `error` if there is one, else `value`; once."""
    if done.done():
        return
    if error is None:
        done.set_result(value)
    else:
        done.set_exception(error)


def settle_each(outcomes: Sequence[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    for done, error in outcomes:
        settle(done, None, error)


def call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """`callback(*args)` on `loop`, from any thread."""
    # A loop closed while its call waited has no one left to tell; the writer goes on.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
