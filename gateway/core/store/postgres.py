"""PostgreSQL as the store's writer uses it: how durable its commits are, matched to the
commit mode SQLite is given (`GATEWAY_DB_SYNCHRONOUS`)."""

from __future__ import annotations

from typing import Any


def commit_mode(synchronous: str) -> Any:
    """A SQLAlchemy `connect` listener for the writer's session. PostgreSQL's commit waits
    for its WAL flush unless told otherwise (`OFF`, `NORMAL`: the writer's commits are
    asynchronous, lost only if the database server itself stops within a fraction of a
    second, as SQLite's `NORMAL` loses them only to a power cut)."""
    setting = "on" if synchronous in ("FULL", "EXTRA") else "off"

    def apply(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SET synchronous_commit = {setting}")
        cur.close()
        dbapi_conn.commit()

    return apply
