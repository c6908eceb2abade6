"""The store's approvals and the grants their decisions leave: a request is decided once
(the first answer changes its row, any later one finds nothing to change), and its
decision's evidence and grant are written in the same transaction."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, select, update

from gateway.core.store import schema
from gateway.core.store.repository import Repository

# Decide an approval only while it is pending: the first answer changes the row, any later
# one finds nothing to change.
_SETTLE_APPROVAL = (
    update(schema.approvals)
    .where(
        schema.approvals.c.id == bindparam("approval_id"),
        schema.approvals.c.status == bindparam("pending"),
    )
    .values(
        status=bindparam("new_status"),
        decision=bindparam("new_decision"),
        decided_at=bindparam("decided_at_"),
    )
)


class ApprovalRows(Repository):
    async def insert_approval(
        self,
        request: Mapping[str, Any],
        nonce: str,
        rows: Sequence[tuple[Any, Mapping[str, Any]]] = (),
    ) -> None:
        await asyncio.shield(self.enqueue_approval(request, nonce, rows))

    def enqueue_approval(
        self,
        request: Mapping[str, Any],
        nonce: str,
        rows: Sequence[tuple[Any, Mapping[str, Any]]] = (),
    ) -> asyncio.Future[None]:
        """Queue a pending approval, with `rows` (its evidence) in the same commit; a
        decision queued after it finds it."""
        return self.enqueue(
            [
                *rows,
                (
                    schema.approvals,
                    {
                        "id": request["approval_id"],
                        "task_id": request["task_id"],
                        "org_id": request.get("org_id", ""),
                        "call_id": request["call_id"],
                        "tool": request["tool"],
                        "status": request["status"],
                        "request": json.dumps(request, default=str),
                        "nonce_sha256": hashlib.sha256(nonce.encode()).hexdigest(),
                        "decision": None,
                        "created_at": request["created_at"],
                        "expires_at": request["expires_at"],
                        "decided_at": None,
                    },
                ),
            ]
        )

    async def settle_approval(
        self,
        approval_id: str,
        status: str,
        decision: Mapping[str, Any] | None,
        at: float,
        rows: Sequence[tuple[Any, Mapping[str, Any]]] = (),
    ) -> bool:
        """Decide a pending approval; False when it was not pending any more (one outcome).
        `rows` (the decision's evidence, a grant) are written in the same transaction, and
        only if this call decided it."""
        params = {
            "pending": "pending",
            "approval_id": approval_id,
            "new_status": status,
            "new_decision": json.dumps(decision) if decision is not None else None,
            "decided_at_": at,
        }
        return await self.commit_if(_SETTLE_APPROVAL, params, rows)

    async def close_orphaned_approvals(self, at: float) -> int:
        """Approvals left pending by a process that stopped: the calls waiting on them are
        gone, so they end as cancelled rather than wait forever in the listing."""
        ap = schema.approvals
        statement = (
            update(ap).where(ap.c.status == "pending").values(status="cancelled", decided_at=at)
        )
        async with self.engine.begin() as conn:
            return int((await conn.execute(statement)).rowcount)

    async def approvals_of(self, task_id: str) -> list[dict[str, Any]]:
        ap = schema.approvals
        query = (
            select(ap.c.request, ap.c.status, ap.c.decision, ap.c.decided_at)
            .where(ap.c.task_id == task_id)
            .order_by(ap.c.created_at)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        out = []
        for request, status, decision, decided_at in rows:
            item = json.loads(request)
            item.update(
                status=status,
                decision=json.loads(decision) if decision else None,
                decided_at=decided_at,
            )
            out.append(item)
        return out

    async def approval_task(self, approval_id: str) -> str | None:
        """The task an approval request belongs to, or None when there is no such request."""
        ap = schema.approvals
        query = select(ap.c.task_id).where(ap.c.id == approval_id)
        async with self.engine.connect() as conn:
            task_id = (await conn.execute(query)).scalar_one_or_none()
        return str(task_id) if task_id is not None else None

    @staticmethod
    def grant_row(task_id: str, tool: str, grant: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A `task_grants` row, to write with the decision that grants it."""
        values = {
            "task_id": task_id,
            "tool": tool,
            "grant": json.dumps(grant),
            "created_at": time.time(),
        }
        return (schema.task_grants, values)

    async def task_grants(self, task_id: str) -> dict[str, dict[str, Any]]:
        tg = schema.task_grants
        query = select(tg.c.tool, tg.c.grant).where(tg.c.task_id == task_id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {tool: json.loads(grant) for tool, grant in rows}
