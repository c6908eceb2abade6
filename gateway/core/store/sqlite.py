"""SQLite as the store uses it: where its files are, the settings every gateway connection
has, and what its "database is locked" looks like.

Every connection is in WAL mode, with the configured commit mode and no checkpoint inside a
commit (`wal_autocheckpoint=0`: the store's `Checkpointer` runs them). Connections of the
writer and the reads wait for a lock someone else holds (`busy_timeout`); the ones that
must never wait (the event loop's commits, the checkpointer) are opened with `connect`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

# A WAL that grew (a reader held an old snapshot while rows came in) is cut back to this
# once a checkpoint has emptied it.
WAL_SIZE_LIMIT = 16 * 1024 * 1024


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{data_dir / 'gateway.db'}"


def database_path(url: str) -> str | None:
    """The file of a SQLite URL; None for any other database, or one in memory."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    return database if database and database != ":memory:" else None


def database_files(url: str) -> list[Path]:
    """The database file of a SQLite URL, and its write-ahead log and shared memory."""
    database = database_path(url)
    if database is None:
        return []
    path = Path(database)
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _settings(synchronous: str, busy_timeout_ms: int) -> list[str]:
    return [
        f"PRAGMA synchronous={synchronous}",
        f"PRAGMA busy_timeout={busy_timeout_ms}",
        "PRAGMA wal_autocheckpoint=0",
        f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}",
    ]


def pragmas(synchronous: str, *, busy_timeout_ms: int) -> Any:
    """A SQLAlchemy `connect` listener: WAL, then the settings of every connection."""

    def apply(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        for statement in _settings(synchronous, busy_timeout_ms):
            cur.execute(statement)
        cur.close()

    return apply


def connect(path: str, synchronous: str) -> sqlite3.Connection:
    """A connection that never waits for a lock, usable from any thread (its user keeps it
    to one at a time). The database is in WAL mode already: the writer's connection set it,
    and it stays. Raises sqlite3.Error when it cannot be set up (a locked database)."""
    conn = sqlite3.connect(path, timeout=0, check_same_thread=False)
    try:
        for statement in _settings(synchronous, 0):
            conn.execute(statement)
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def is_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked": another connection holds the write lock."""
    return isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorname", "") in (
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
    )
