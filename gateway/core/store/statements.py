"""How the writer's rows become statements of one dialect, each compiled once.

The statements are SQLAlchemy Core, compiled once per table and columns (an INSERT), or per
statement object (a guard: a module constant), then run on the DBAPI connection directly:
each batch skips the per-execute machinery. On PostgreSQL the rows of one table in a batch
go as one `COPY ... FROM STDIN` (writer.py says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.engine import Dialect

Row = tuple[Any, dict[str, Any]]
Grouped = dict[tuple[Table, tuple[str, ...]], list[dict[str, Any]]]
# A statement's SQL, and the order of its parameters when the dialect binds by position.
Compiled = tuple[str, tuple[str, ...] | None]


def group(rows: Iterable[Row]) -> Grouped:
    """Rows by table and columns, each group one statement, in the order they came."""
    grouped: Grouped = {}
    for table, values in rows:
        grouped.setdefault((table, tuple(values)), []).append(values)
    return grouped


class Statements:
    """The compiled statements of one dialect, and the rows they take."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._copy = dialect.name == "postgresql"
        self._inserts: dict[tuple[str, tuple[str, ...]], Compiled] = {}
        self._copies: dict[tuple[str, tuple[str, ...]], str] = {}
        # Guards are module constants: compiled once, known by identity.
        self._guards: dict[int, Compiled] = {}

    def _compiled(self, statement: Any, keys: list[str] | None = None) -> Compiled:
        compiled = statement.compile(dialect=self.dialect, column_keys=keys)
        order = tuple(compiled.positiontup) if compiled.positiontup else None
        return str(compiled), order

    def guard(self, statement: Any, params: Mapping[str, Any]) -> tuple[str, Any]:
        """`statement` (an UPDATE with bind parameters) and `params` as the DBAPI takes
        them."""
        cached = self._guards.get(id(statement))
        if cached is None:
            cached = self._guards[id(statement)] = self._compiled(statement)
        sql, order = cached
        return sql, tuple(params[k] for k in order) if order is not None else params

    def _insert(self, table: Table, keys: tuple[str, ...]) -> Compiled:
        cached = self._inserts.get((table.name, keys))
        if cached is None:
            cached = self._inserts[(table.name, keys)] = self._compiled(insert(table), list(keys))
        return cached

    def _copy_into(self, table: Table, keys: tuple[str, ...]) -> str:
        cached = self._copies.get((table.name, keys))
        if cached is None:
            quote = self.dialect.identifier_preparer
            columns = ", ".join(quote.quote(key) for key in keys)
            cached = f"COPY {quote.format_table(table)} ({columns}) FROM STDIN"
            self._copies[(table.name, keys)] = cached
        return cached

    def insert(self, cursor: Any, grouped: Grouped) -> None:
        """Insert every group of rows, in order, in the cursor's open transaction."""
        for (table, keys), values_list in grouped.items():
            if self._copy and len(values_list) > 1:
                with cursor.copy(self._copy_into(table, keys)) as copy:
                    for values in values_list:
                        copy.write_row(tuple(values[k] for k in keys))
                continue
            sql, order = self._insert(table, keys)
            params = (
                [tuple(v[k] for k in order) for v in values_list]
                if order is not None
                else values_list
            )
            if len(params) == 1:
                cursor.execute(sql, params[0])
            else:
                cursor.executemany(sql, params)
