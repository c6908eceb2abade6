"""The store's tasks: a task's identity as it was issued, and its end (a revocation).

Every read is scoped by owner; a task counts as live until it ended or expired.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select

from gateway.core.identity import TaskIdentity
from gateway.core.store import schema
from gateway.core.store.repository import Repository


@dataclass(frozen=True)
class TaskRecord:
    identity: TaskIdentity
    revoked_at: float | None
    revoke_reason: str | None


# Tasks with their end beside them, where they have one.
_WITH_END = schema.tasks.outerjoin(
    schema.revocations, schema.tasks.c.task_id == schema.revocations.c.task_id
)


class TaskRows(Repository):
    async def insert_task(self, identity: TaskIdentity) -> None:
        await self.commit(
            [
                (
                    schema.tasks,
                    {
                        "task_id": identity.task_id,
                        "org_id": identity.org_id,
                        "actor_id": identity.actor.id,
                        "identity": identity.model_dump_json(),
                        "created_at": identity.created_at.timestamp(),
                        "expires_at": identity.expires_at.timestamp(),
                    },
                )
            ]
        )

    async def get_task(self, task_id: str) -> TaskRecord | None:
        query = (
            select(
                schema.tasks.c.identity,
                schema.revocations.c.revoked_at,
                schema.revocations.c.reason,
            )
            .select_from(_WITH_END)
            .where(schema.tasks.c.task_id == task_id)
        )
        async with self.reading("task lookup") as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return TaskRecord(TaskIdentity.model_validate_json(row[0]), row[1], row[2])

    async def live_tasks(self, now: float) -> list[TaskRecord]:
        query = (
            select(schema.tasks.c.identity)
            .select_from(_WITH_END)
            .where(schema.revocations.c.task_id.is_(None), schema.tasks.c.expires_at > now)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [TaskRecord(TaskIdentity.model_validate_json(r[0]), None, None) for r in rows]

    async def live_task_count(self, org_id: str, now: float) -> int:
        """How many of `org_id`'s tasks have neither ended nor expired at `now`."""
        query = (
            select(func.count())
            .select_from(_WITH_END)
            .where(
                schema.tasks.c.org_id == org_id,
                schema.revocations.c.task_id.is_(None),
                schema.tasks.c.expires_at > now,
            )
        )
        async with self.reading("counting live tasks") as conn:
            return int((await conn.execute(query)).scalar_one())

    async def revoke_task(self, task_id: str, reason: str) -> bool:
        """Record the task's end; False when it had already ended (idempotent)."""
        async with self.writing("revocation") as conn:
            existing = (
                await conn.execute(
                    select(schema.revocations.c.task_id).where(
                        schema.revocations.c.task_id == task_id
                    )
                )
            ).first()
            if existing is not None:
                return False
            await conn.execute(
                insert(schema.revocations).values(
                    task_id=task_id, revoked_at=time.time(), reason=reason[:256]
                )
            )
        return True

    async def task_rows(
        self,
        *,
        now: float,
        org_ids: Sequence[str] | None = None,
        actor_id: str | None = None,
        status: str | None = None,
        door: str | None = None,
        limit: int = 200,
    ) -> list[TaskRecord]:
        """Tasks newest first, narrowed by owner, actor, status (`active`, `ended`,
        `expired`) and by a door one of their calls came through. `org_ids` None: every
        organization; an empty list: none."""
        tasks, rev, ev = schema.tasks, schema.revocations, schema.evidence
        query = (
            select(tasks.c.identity, rev.c.revoked_at, rev.c.reason)
            .select_from(tasks.outerjoin(rev, tasks.c.task_id == rev.c.task_id))
            .order_by(tasks.c.created_at.desc(), tasks.c.task_id)
            .limit(limit)
        )
        if org_ids is not None:
            query = query.where(tasks.c.org_id.in_(list(org_ids)))
        if actor_id is not None:
            query = query.where(tasks.c.actor_id == actor_id)
        if status == "ended":
            query = query.where(rev.c.task_id.is_not(None))
        elif status == "expired":
            query = query.where(rev.c.task_id.is_(None), tasks.c.expires_at <= now)
        elif status == "active":
            query = query.where(rev.c.task_id.is_(None), tasks.c.expires_at > now)
        if door is not None:
            through = select(ev.c.task_id).where(ev.c.kind == "call", ev.c.door == door)
            query = query.where(tasks.c.task_id.in_(through))
        async with self.reading("listing tasks") as conn:
            rows = (await conn.execute(query)).all()
        return [TaskRecord(TaskIdentity.model_validate_json(r[0]), r[1], r[2]) for r in rows]

    async def task_tallies(self, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per task: its calls, the calls refused (`denied`), the doors they came through,
        and its approvals still pending, as the store holds them (every node of a cluster
        sees the same)."""
        ev, ap = schema.evidence, schema.approvals
        tallies: dict[str, dict[str, Any]] = {
            t: {"calls": 0, "refused": 0, "pending_approvals": 0, "doors": []} for t in task_ids
        }
        if not task_ids:
            return tallies
        ids = list(task_ids)
        calls = (
            select(ev.c.task_id, ev.c.status, ev.c.door, func.count())
            .where(ev.c.task_id.in_(ids), ev.c.kind == "call")
            .group_by(ev.c.task_id, ev.c.status, ev.c.door)
        )
        pending = (
            select(ap.c.task_id, func.count())
            .where(ap.c.task_id.in_(ids), ap.c.status == "pending")
            .group_by(ap.c.task_id)
        )
        async with self.reading("counting task calls") as conn:
            call_rows = (await conn.execute(calls)).all()
            pending_rows = (await conn.execute(pending)).all()
        for task_id, call_status, door, count in call_rows:
            tally = tallies[str(task_id)]
            tally["calls"] += int(count)
            if call_status == "denied":
                tally["refused"] += int(count)
            if door is not None and door not in tally["doors"]:
                tally["doors"] = sorted([*tally["doors"], str(door)])
        for task_id, count in pending_rows:
            tallies[str(task_id)]["pending_approvals"] = int(count)
        return tallies
