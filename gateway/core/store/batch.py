"""What the store hands its group-commit writer (gateway/core/store/writer.py).

Two kinds of item go through the writer's queue, in the order they were handed over: rows
to insert (`Pending`, one caller's rows a part, each caller answered on its own should the
batch fail), and one conditional change (`Guarded`: rows written only if an UPDATE changed
exactly one row). Each says which event loop its callers wait on, so the writer's thread
settles them there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.core.store.commit import call_soon, settle
from gateway.core.store.statements import Row

# One caller's rows, and the future that settles once they are committed.
Part = tuple[list[Row], asyncio.Future[None]]


@dataclass
class Pending:
    """Rows to insert in the next batch, as `parts`: each is one caller's, and should the
    batch fail, each is stored or failed on its own."""

    parts: list[Part]
    loop: asyncio.AbstractEventLoop

    @property
    def count(self) -> int:
        return sum(len(rows) for rows, _done in self.parts)


@dataclass
class Guarded:
    """One conditional change: `rows` are written only if `guard` (an UPDATE) changed
    exactly one row, in one transaction; `done` answers whether it did."""

    guard: Any  # an UPDATE with bind parameters, built once
    params: dict[str, Any]
    rows: list[Row]
    done: asyncio.Future[bool]
    loop: asyncio.AbstractEventLoop

    @property
    def count(self) -> int:
        return len(self.rows)

    def settle(self, changed: bool, error: BaseException | None = None) -> None:
        call_soon(self.loop, settle, self.done, changed, error)
