"""The store's one commit policy (gateway/core/store/commit.py) on a real SQLite database: a
database locked by someone else is waited for, given way to, or failed as the caller asks;
one caller's bad rows fail that caller alone; a transaction that fails is never half
stored."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from gateway.core.errors import StorageError
from gateway.core.store import schema, sqlite
from gateway.core.store.commit import Busy, Fixed, GaveWay, attempt, failure, write_parts
from gateway.core.store.database import Store
from gateway.core.store.statements import Row, Statements

Outcomes = list[StorageError | None]


def row(record_id: str) -> Row:
    return Store.evidence_row(
        record_id=record_id, task_id="task_p", org_id="org_a", kind="event", record={}
    )


@dataclass
class Database:
    path: str
    statements: Statements
    conn: sqlite3.Connection  # the loop's kind: never waits for a lock

    def commit(
        self, parts: list[list[Row]], busy: Busy, waiting: Callable[[], bool] = lambda: True
    ) -> Outcomes:
        def work(conn: Any, isolated: bool) -> Outcomes:
            return write_parts(self.statements, conn, parts, isolated=isolated)

        return attempt(
            Fixed(lambda: self.conn),
            work,
            fail=lambda exc: [failure(exc) for _part in parts],
            busy=busy,
            waiting=waiting,
            isolate=len(parts) > 1,
        )

    def stored(self) -> list[str]:
        with sqlite3.connect(self.path) as conn:
            return [r[0] for r in conn.execute("SELECT id FROM evidence ORDER BY seq")]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    """An empty store's schema in WAL mode, the statements of its dialect, and a
    connection set up as the event loop's is."""
    path = str(tmp_path / "gateway.db")
    engine = create_engine(f"sqlite:///{path}")
    schema.metadata.create_all(engine)
    statements = Statements(engine.dialect)
    engine.dispose()
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
    conn = sqlite.connect(path, "NORMAL")
    try:
        yield Database(path, statements, conn)
    finally:
        conn.close()


@contextlib.contextmanager
def locked(path: str) -> Iterator[sqlite3.Connection]:
    """Another connection holding the database's write lock, until it lets go or the block
    ends."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.rollback()
        holder.close()


def test_a_caller_whose_rows_are_refused_fails_alone(database: Database) -> None:
    assert database.commit([[row("evt_1")]], Busy.FAIL) == [None]
    # The second caller repeats an id already stored: only its rows are turned away.
    outcomes = database.commit(
        [[row("evt_2")], [row("evt_3"), row("evt_1")], [row("evt_4")]], Busy.FAIL
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], StorageError)
    assert database.stored() == ["evt_1", "evt_2", "evt_4"]


def test_a_locked_database_is_given_way_to_with_nothing_stored(database: Database) -> None:
    parts = [[row("evt_1")], [row("evt_2")]]
    with locked(database.path), pytest.raises(GaveWay):
        database.commit(parts, Busy.GIVE_WAY)
    assert database.stored() == []
    # The one it was given to commits it whole, once.
    assert database.commit(parts, Busy.FAIL) == [None, None]
    assert database.stored() == ["evt_1", "evt_2"]


def test_a_locked_database_is_waited_for_while_the_writer_runs(database: Database) -> None:
    tries: list[int] = []
    with locked(database.path) as holder:

        def waiting() -> bool:
            # The lock's holder lets go after the first refused try.
            tries.append(1)
            holder.rollback()
            return True

        outcomes = database.commit([[row("evt_1")]], Busy.WAIT, waiting)
    assert outcomes == [None]
    assert len(tries) == 1
    assert database.stored() == ["evt_1"]


def test_a_locked_database_fails_the_transaction_once_the_writer_stops(
    database: Database,
) -> None:
    with locked(database.path):
        outcomes = database.commit([[row("evt_1")], [row("evt_2")]], Busy.WAIT, lambda: False)
    assert all(isinstance(outcome, StorageError) for outcome in outcomes)
    assert database.stored() == []
