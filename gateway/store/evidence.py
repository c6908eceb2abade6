"""The store's evidence: one row a record, the call's outcome beside its JSON, read back
in the order it was committed (`seq`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select

from gateway.store import schema
from gateway.store.repository import Repository


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
        self, org_id: str, task_id: str, *, after: int = 0, limit: int = 500
    ) -> list[dict[str, Any]]:
        ev = schema.evidence
        query = (
            select(ev.c.seq, ev.c.record)
            .where(ev.c.org_id == org_id, ev.c.task_id == task_id, ev.c.seq > after)
            .order_by(ev.c.seq)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        out = []
        for seq, record in rows:
            item = json.loads(record)
            item["seq"] = seq
            out.append(item)
        return out
