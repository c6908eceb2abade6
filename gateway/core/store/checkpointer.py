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
    once a whole `quiet_s` passed without a commit, or once `rows` were committed since the
    last time, whichever is first. `PASSIVE`: it copies what no reader still needs and
    waits for no one, and the copy goes on while commits append to the WAL.

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
        # Set by the first commit after a checkpoint, and by stopping.
        self._dirty = threading.Event()
        # Set once `rows` were committed since the last checkpoint, and by stopping.
        self._enough = threading.Event()
        self._stopping = False
        # Rows since the last checkpoint, and commits ever: counted by the committing
        # threads and read or reset by this one without a lock (an estimate is all a
        # threshold needs, and any change at all is all a quiet moment needs).
        self._since = 0
        self._commits = 0
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._dirty.set()
        self._enough.set()
        self._thread.join()

    def committed(self, rows: int) -> None:
        """Called by the committing thread after each commit. It wakes this thread only
        for the first commit since a checkpoint and for the one that crosses `rows`:
        waking it for every commit made each commit hand the GIL to a thread that only
        went back to sleep (4 % of the event loop's time in a snapshot loop, 7 % under
        `make stress`)."""
        self._since += rows
        self._commits += 1
        if not self._dirty.is_set():
            self._dirty.set()
        if self._since >= self.rows and not self._enough.is_set():
            self._enough.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            # Checked again after each checkpoint: a `stop` whose wake the clears below
            # took is seen here.
            while not self._stopping:
                self._dirty.wait()
                # Wait for a quiet moment (a whole `quiet_s` without a commit), unless
                # enough rows pile up meanwhile.
                while not self._stopping and self._since < self.rows:
                    seen = self._commits
                    if self._enough.wait(self.quiet_s) or self._commits == seen:
                        break
                if self._stopping:
                    return
                # Cleared before the copy: a commit after this sets it again, and one
                # before is in the WAL the copy reads.
                self._dirty.clear()
                self._enough.clear()
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
