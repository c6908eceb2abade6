"""Bringing a database to the schema this gateway expects, with Alembic, one process at a
time.

`upgrade(url)` runs at start and from `gateway db upgrade`. Processes starting together
take turns: on PostgreSQL behind an advisory lock held for the migration, on SQLite behind
an exclusive lock on a file beside the database. A database written before migrations
existed (it has the first release's tables but no `alembic_version`) is recognised and
stamped with the revision its tables match before the rest is applied.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["FIRST_RELEASE", "current", "head", "make_url", "sync_url", "upgrade"]

MIGRATIONS = Path(__file__).parent / "migrations"
# pg_advisory_lock's key for "the gateway's schema" (any fixed 64-bit number).
_ADVISORY_KEY = 0x6761746577617901
# The revision a database of the first release is at (its tables, before migrations).
FIRST_RELEASE = "0001"


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head() -> str:
    revision = ScriptDirectory.from_config(config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def sync_url(url: str) -> str:
    """The same database through a blocking driver."""
    return url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg")


def upgrade(url: str, revision: str = "head") -> tuple[str | None, str]:
    """Migrate the database at `url` (async or sync driver URL) to `revision`; returns the
    revision it was at and the one it is at now."""
    engine = create_engine(sync_url(url))
    try:
        with _turn(engine.url.render_as_string(hide_password=False)), engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_KEY})
            try:
                before = current(conn)
                if before is None and inspect(conn).has_table("tasks"):
                    # The first release created its tables without migrations.
                    _apply(conn, "stamp", FIRST_RELEASE)
                    before = FIRST_RELEASE
                _apply(conn, "upgrade", revision)
                after = current(conn)
            finally:
                # A failed migration leaves the transaction aborted: the unlock then fails too,
                # and closing the session (below) is what releases the lock.
                if conn.dialect.name == "postgresql":
                    with contextlib.suppress(SQLAlchemyError):
                        conn.rollback()
                        conn.execute(
                            text("SELECT pg_advisory_unlock(:key)"), {"key": _ADVISORY_KEY}
                        )
                        conn.commit()
    finally:
        engine.dispose()
    assert after is not None
    return before, after


def _apply(conn: Connection, what: str, revision: str) -> None:
    cfg = config()
    cfg.attributes["connection"] = conn
    if what == "stamp":
        command.stamp(cfg, revision)
    else:
        command.upgrade(cfg, revision)
    conn.commit()


@contextlib.contextmanager
def _turn(url: str) -> Iterator[None]:
    """On SQLite, one migrating process at a time (PostgreSQL's lock is in the database)."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        yield
        return
    lock_path = Path(parsed.database).with_name(Path(parsed.database).name + ".migrate-lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # Private like every file of the data dir.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
