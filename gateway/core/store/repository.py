"""What the store's repositories read and write through.

Each concept's rows (tasks, evidence, idempotency keys, approvals, artifacts) are a
repository: a class of its queries, written against this one. `Store` is all of them over
one engine and one group-commit writer, so a caller holds one object and every repository
commits through the same writer, in the order it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core.errors import StorageError

Rows = Sequence[tuple[Any, Mapping[str, Any]]]


class Connections:
    """An engine's two ways in, a connection for reads and a transaction for writes, each
    turning a database error into a StorageError; the subclass provides the engine."""

    @property
    def engine(self) -> AsyncEngine:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def reading(self, what: str) -> AsyncIterator[AsyncConnection]:
        """A connection of the engine for reads; a database error in it is a StorageError
        saying `what` failed."""
        try:
            async with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StorageError(f"{what} failed: {exc}") from exc

    @contextlib.asynccontextmanager
    async def writing(self, what: str) -> AsyncIterator[AsyncConnection]:
        """A transaction of the engine, committed at the end of the block; a database error
        in it is a StorageError saying `what` failed."""
        try:
            async with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StorageError(f"{what} failed: {exc}") from exc


class Repository(Connections):
    """The reads' engine and the writer's three ways in; `Store` provides them."""

    async def commit(self, rows: Rows) -> None:
        """Insert `rows` in the next batch; return once it is committed."""
        raise NotImplementedError

    def enqueue(self, rows: Rows) -> asyncio.Future[None]:
        """Queue `rows` for the next batch now; the future settles once they are
        committed."""
        raise NotImplementedError

    async def commit_if(self, guard: Any, params: Mapping[str, Any], rows: Rows = ()) -> bool:
        """Run `guard` (an UPDATE) and, only if it changed exactly one row, insert `rows`;
        whether it changed one."""
        raise NotImplementedError
