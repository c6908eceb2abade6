"""The store's idempotency keys: the result a side-effect call left under its key, to
replay to a caller who repeats it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gateway.core.store import schema
from gateway.core.store.repository import Repository


@dataclass(frozen=True)
class IdempotentResult:
    """What a side-effect call under an idempotency key left: its result, to replay."""

    result_json: str
    call_id: str
    input_sha256: str | None  # None for rows kept before inputs were recorded


class IdempotencyRows(Repository):
    async def idempotent_result(self, task_id: str, tool: str, key: str) -> IdempotentResult | None:
        idem = schema.idempotency
        query = select(idem.c.result, idem.c.call_id, idem.c.input_sha256).where(
            idem.c.task_id == task_id, idem.c.tool == tool, idem.c.key == key
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return IdempotentResult(result_json=str(row[0]), call_id=str(row[1]), input_sha256=row[2])

    @staticmethod
    def idempotency_row(
        task_id: str, tool: str, key: str, call_id: str, result_json: str, input_sha256: str
    ) -> tuple[Any, dict[str, Any]]:
        return (
            schema.idempotency,
            {
                "task_id": task_id,
                "tool": tool,
                "key": key,
                "call_id": call_id,
                "result": result_json,
                "created_at": time.time(),
                "input_sha256": input_sha256,
            },
        )
