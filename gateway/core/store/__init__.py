"""Persistence: tasks, revocations, evidence, artifacts and idempotency keys.

SQLAlchemy Core over an async engine: SQLite in the data dir by default, PostgreSQL when
several gateways share the work. Every read is scoped by owner.
"""

from gateway.core.store.database import Store
from gateway.core.store.schema import metadata

__all__ = ["Store", "metadata"]
