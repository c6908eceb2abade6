"""A database as the first release left it: its five tables as they were, no migrations
table. Made from a database of today by taking away what came after, through SQLAlchemy so
it works on SQLite and PostgreSQL alike."""

from __future__ import annotations

from sqlalchemy import create_engine, text

from gateway.core.store.migrate import sync_url


def reduce_to_first_release(url: str) -> None:
    engine = create_engine(sync_url(url))
    try:
        with engine.begin() as conn:
            for table in (
                "alembic_version",
                "approvals",
                "task_grants",
                "nodes",
                "task_owners",
                "call_intents",
            ):
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            conn.execute(text("DROP INDEX IF EXISTS ix_revocations_at"))
            conn.execute(text("ALTER TABLE idempotency DROP COLUMN input_sha256"))
    finally:
        engine.dispose()
