"""The store's one commit policy (gateway/store/commit.py) on a real SQLite database: a
database locked by someone else is waited for, given way to, or failed as the caller asks;
one caller's bad rows fail that caller alone; a transaction that fails is never half
stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from gateway.errors import StorageError
from gateway.store import schema, sqlite
from gateway.store.commit import Busy, Fixed, GaveWay, attempt, failure, write_parts
from gateway.store.database import Store
from gateway.store.statements import Row, Statements

Outcomes = list[StorageError | None]


def row(record_id: str) -> Row:
    return Store.evidence_row(
        record_id=record_id, task_id="task_p", org_id="org_a", kind="event", record={}
    )


@pytest.fixture
def database(tmp_path: Path) -> tuple[str, Statements]:
    """An empty store's schema in WAL mode, and the statements of its dialect."""
    path = str(tmp_path / "gateway.db")
    engine = create_engine(f"sqlite:///{path}")
    schema.metadata.create_all(engine)
    statements = Statements(engine.dialect)
    engine.dispose()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return path, statements


def stored(path: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM evidence ORDER BY seq")]


def commit_parts(
    statements: Statements,
    conn: Any,
    parts: list[list[Row]],
    busy: Busy,
    waiting: Any = lambda: True,
) -> Outcomes:
    def work(c: Any, isolated: bool) -> Outcomes:
        return write_parts(statements, c, parts, isolated=isolated)

    return attempt(
        Fixed(lambda: conn),
        work,
        fail=lambda exc: [failure(exc) for _part in parts],
        busy=busy,
        waiting=waiting,
        isolate=len(parts) > 1,
    )


def locked(path: str) -> sqlite3.Connection:
    """Another connection holding the database's write lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_caller_whose_rows_are_refused_fails_alone(database: tuple[str, Statements]) -> None:
    path, statements = database
    conn = sqlite.connect(path, "NORMAL")
    try:
        assert commit_parts(statements, conn, [[row("evt_1")]], Busy.FAIL) == [None]
        # The second caller repeats an id already stored: only its rows are turned away.
        outcomes = commit_parts(
            statements,
            conn,
            [[row("evt_2")], [row("evt_3"), row("evt_1")], [row("evt_4")]],
            Busy.FAIL,
        )
    finally:
        conn.close()
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], StorageError)
    assert stored(path) == ["evt_1", "evt_2", "evt_4"]


def test_a_locked_database_is_given_way_to_with_nothing_stored(
    database: tuple[str, Statements],
) -> None:
    path, statements = database
    conn = sqlite.connect(path, "NORMAL")
    holder = locked(path)
    try:
        with pytest.raises(GaveWay):
            commit_parts(statements, conn, [[row("evt_1")], [row("evt_2")]], Busy.GIVE_WAY)
    finally:
        holder.rollback()
        holder.close()
    # The caller that took the transaction over commits it whole, once.
    try:
        assert commit_parts(statements, conn, [[row("evt_1")], [row("evt_2")]], Busy.FAIL) == [
            None,
            None,
        ]
    finally:
        conn.close()
    assert stored(path) == ["evt_1", "evt_2"]


def test_a_locked_database_is_waited_for_while_the_writer_runs(
    database: tuple[str, Statements],
) -> None:
    path, statements = database
    conn = sqlite.connect(path, "NORMAL")
    holder = locked(path)
    tries: list[int] = []

    def waiting() -> bool:
        # The lock's holder lets go after the first refused try.
        tries.append(1)
        holder.rollback()
        return True

    try:
        outcomes = commit_parts(statements, conn, [[row("evt_1")]], Busy.WAIT, waiting)
    finally:
        holder.close()
        conn.close()
    assert outcomes == [None]
    assert len(tries) == 1
    assert stored(path) == ["evt_1"]


def test_a_locked_database_fails_the_transaction_once_the_writer_stops(
    database: tuple[str, Statements],
) -> None:
    path, statements = database
    conn = sqlite.connect(path, "NORMAL")
    holder = locked(path)
    try:
        outcomes = commit_parts(
            statements, conn, [[row("evt_1")], [row("evt_2")]], Busy.WAIT, lambda: False
        )
    finally:
        holder.rollback()
        holder.close()
        conn.close()
    assert all(isinstance(outcome, StorageError) for outcome in outcomes)
    assert stored(path) == []
