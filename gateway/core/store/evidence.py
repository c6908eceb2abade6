"""The store's evidence: one row a record, the call's outcome beside its JSON, read back
in the order it was committed (`seq`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select

from gateway.core.store import schema
from gateway.core.store.repository import Repository

# The evidence table's sequence numbers are an `Integer` column: 32 bits on PostgreSQL. A
# cursor past it is past every record (and is not sent to the database, which refuses it).
SEQ_CEILING = 2**31 - 1
# The largest sequence number a reader's cursor (`after`, `before`) may name: any 64-bit
# integer, which SQLite's and PostgreSQL's columns could hold.
MAX_SEQ = 2**63 - 1


class EvidenceRows(Repository):
    async def event_count(self, task_id: str) -> int:
        """How many evidence records of the task are not calls."""
        ev = schema.evidence
        query = select(func.count()).where(ev.c.task_id == task_id, ev.c.kind != "call")
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def call_counts(self, task_id: str) -> dict[str, int]:
        query = (
            select(schema.evidence.c.status, func.count())
            .where(schema.evidence.c.task_id == task_id, schema.evidence.c.kind == "call")
            .group_by(schema.evidence.c.status)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {str(status): int(count) for status, count in rows}

    @staticmethod
    def evidence_row(
        *,
        record_id: str,
        task_id: str,
        org_id: str,
        kind: str,
        record: Mapping[str, Any],
        tool: str | None = None,
        door: str | None = None,
        status: str | None = None,
        error_code: str | None = None,
        charged: bool = False,
        side_effect: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        return (
            schema.evidence,
            {
                "id": record_id,
                "task_id": task_id,
                "org_id": org_id,
                "kind": kind,
                "tool": tool,
                "door": door,
                "status": status,
                "error_code": error_code,
                "charged": int(charged),
                "side_effect": int(side_effect),
                "record": json.dumps(record, separators=(",", ":"), default=str),
                "created_at": time.time(),
            },
        )

    async def usage(self, task_id: str) -> tuple[int, int]:
        """Calls and side effects a task has spent, as its evidence records them."""
        ev = schema.evidence
        query = select(
            func.coalesce(func.sum(ev.c.charged), 0), func.coalesce(func.sum(ev.c.side_effect), 0)
        ).where(ev.c.task_id == task_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).one()
        return int(row[0]), int(row[1])

    async def evidence_for(
        self,
        org_id: str,
        task_id: str,
        *,
        after: int = 0,
        limit: int = 500,
        before: int | None = None,
    ) -> list[dict[str, Any]]:
        """A task's records in the order they were stored: the first `limit` after `after`,
        or, with `before`, the last `limit` before it (still oldest first)."""
        ev = schema.evidence
        if after >= SEQ_CEILING:
            return []
        query = select(ev.c.seq, ev.c.record).where(
            ev.c.org_id == org_id, ev.c.task_id == task_id, ev.c.seq > after
        )
        if before is not None and before > SEQ_CEILING:
            # Past every sequence number: the newest records (a bound PostgreSQL's integer
            # column could not be compared with).
            query = query.order_by(ev.c.seq.desc()).limit(limit)
        elif before is None:
            query = query.order_by(ev.c.seq).limit(limit)
        else:
            query = query.where(ev.c.seq < before).order_by(ev.c.seq.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = list((await conn.execute(query)).all())
        if before is not None:
            rows.reverse()
        return _records(rows)

    async def evidence_of_kinds(
        self, org_id: str, task_id: str, kinds: Sequence[str], *, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """A task's records of these kinds only (the event kinds, as stored), oldest first:
        the few a task's page needs from all of its evidence, however long it is."""
        ev = schema.evidence
        query = (
            select(ev.c.seq, ev.c.record)
            .where(ev.c.org_id == org_id, ev.c.task_id == task_id, ev.c.kind.in_(list(kinds)))
            .order_by(ev.c.seq)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = list((await conn.execute(query)).all())
        return _records(rows)


def _records(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Evidence rows `(seq, record)` as the records they hold, each with its `seq`."""
    out = []
    for seq, record in rows:
        item = json.loads(record)
        item["seq"] = seq
        out.append(item)
    return out
