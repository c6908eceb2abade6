"""SQLite's checkpointer: the WAL copied into the database file off the commit path.

A checkpoint copies pages into the database file and, with `FULL`, flushes it, which took a
commit from 0.1 ms to several ms when SQLite ran it in the committing connection; so every
gateway connection has `wal_autocheckpoint=0`, and `Checkpointer`, a thread with a
connection of its own, runs them at a quiet moment or once enough rows were committed since
the last one. Its checkpoints are `PASSIVE`: they never wait for, nor hold up, a writer or
a reader.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from gateway.core.store import sqlite

log = logging.getLogger(__name__)


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

    def __init__(
        self, path: str, turn: threading.Lock, synchronous: str, *, quiet_s: float, rows: int
    ) -> None:
        self.path = path
        self.synchronous = synchronous
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
        conn: sqlite3.Connection | None = None
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
                if conn is None:
                    conn = self._connect()
                    if conn is None:
                        continue
                self.checkpoint(conn)
                # The tail, and the WAL started over: this process's commits hold still
                # for as long as it takes to copy what came during the first pass.
                with self._turn:
                    self.checkpoint(conn, "RESTART")
        finally:
            if conn is not None:
                conn.close()

    def _connect(self) -> sqlite3.Connection | None:
        """A gateway connection like the others, which waits for no one; None while the
        database is locked (as a failed checkpoint, the next commit brings the next try)."""
        try:
            return sqlite.connect(self.path, self.synchronous)
        except sqlite3.Error as exc:
            log.debug("SQLite checkpoint connection not opened yet: %r", exc)
            return None

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
