"""What a task of the suite is: a user's ask, the script that does it, the check that reads
the app's database (outside the browser) to say it was done."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.realapps.agent import Agent


class Db:
    """The app's database, read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
            return conn.execute(sql, args).fetchall()

    def one(self, sql: str, *args: Any) -> Any:
        found = self.rows(sql, *args)
        return found[0][0] if found else None


Run = Callable[[Agent], Awaitable[Any]]
# The check gets the database, the agent's answer and the app's folder; None when done.
Check = Callable[[Db, Any, Path], str | None]


@dataclass(frozen=True)
class Task:
    name: str
    ask: str
    run: Run
    check: Check


def expect(condition: bool, problem: str) -> str | None:
    return None if condition else problem
