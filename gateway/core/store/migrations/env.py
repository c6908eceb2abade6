"""Alembic's entry point for the gateway's migrations: always run on a connection the
gateway hands over (`gateway.core.store.migrate`), never from an alembic.ini of its own."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
