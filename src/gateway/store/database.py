"""The store: an async SQLAlchemy engine, and a group-commit writer for evidence.

Evidence of a call must be durable before its result is returned, but one transaction per
call caps throughput at the disk's commit rate. The writer takes every record queued while
the previous transaction was committing and writes them in one transaction; each caller
awaits the commit of the batch that holds its record, so nothing is acknowledged before it
is stored, and concurrent calls share one commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.errors import NotFound, StorageError
from gateway.identity import TaskIdentity
from gateway.store import schema


@dataclass(frozen=True)
class TaskRecord:
    identity: TaskIdentity
    revoked_at: float | None
    revoke_reason: str | None


@dataclass(frozen=True)
class ArtifactRef:
    id: str
    task_id: str
    org_id: str
    name: str
    media_type: str
    size: int
    sha256: str
    path: str

    def public(self) -> dict[str, Any]:
        return {
            "artifact_id": self.id,
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
        }


@dataclass
class _Pending:
    rows: list[tuple[Any, dict[str, Any]]]
    done: asyncio.Future[None]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{data_dir / 'gateway.db'}"


class Store:
    def __init__(self, url: str, data_dir: Path, *, synchronous: str = "NORMAL") -> None:
        self.url = url
        self.data_dir = data_dir
        self._synchronous = synchronous.upper()
        self._engine: AsyncEngine | None = None
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # commits made by the writer, for metrics and benchmarks

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise StorageError("the store is not started")
        return self._engine

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "artifacts").mkdir(exist_ok=True)
        engine = create_async_engine(self.url)
        if self.is_sqlite:
            synchronous = self._synchronous

            @event.listens_for(engine.sync_engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={synchronous}")
                cur.execute("PRAGMA busy_timeout=5000")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

        async with engine.begin() as conn:
            await conn.run_sync(schema.metadata.create_all)
        self._engine = engine
        self._writer = asyncio.create_task(self._write_loop(), name="evidence-writer")

    async def close(self) -> None:
        if self._writer is not None:
            # Let what is queued reach the disk before the engine goes.
            await self._queue.join()
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    # -- group commit -----------------------------------------------------------------

    async def commit(self, rows: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
        """Insert `(table, values)` rows in the next batch; return once it is committed."""
        if self._writer is None:
            raise StorageError("the store is not started")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending([(t, dict(v)) for t, v in rows], done))
        await asyncio.shield(done)

    async def _write_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write_batch(batch)
            except Exception as exc:  # a failed batch fails its callers, not the writer
                error = StorageError(f"evidence could not be stored: {type(exc).__name__}: {exc}")
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(error)
            else:
                self.batches += 1
                for item in batch:
                    if not item.done.done():
                        item.done.set_result(None)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write_batch(self, batch: list[_Pending]) -> None:
        grouped: dict[Any, list[dict[str, Any]]] = {}
        for item in batch:
            for table, values in item.rows:
                grouped.setdefault(table, []).append(values)
        async with self.engine.begin() as conn:
            for table, values_list in grouped.items():
                await conn.execute(insert(table), values_list)

    # -- tasks ------------------------------------------------------------------------

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
            .select_from(
                schema.tasks.outerjoin(
                    schema.revocations, schema.tasks.c.task_id == schema.revocations.c.task_id
                )
            )
            .where(schema.tasks.c.task_id == task_id)
        )
        try:
            async with self.engine.connect() as conn:
                row = (await conn.execute(query)).first()
        except SQLAlchemyError as exc:
            raise StorageError(f"task lookup failed: {exc}") from exc
        if row is None:
            return None
        return TaskRecord(TaskIdentity.model_validate_json(row[0]), row[1], row[2])

    async def live_tasks(self, now: float) -> list[TaskRecord]:
        query = (
            select(schema.tasks.c.identity)
            .select_from(
                schema.tasks.outerjoin(
                    schema.revocations, schema.tasks.c.task_id == schema.revocations.c.task_id
                )
            )
            .where(schema.revocations.c.task_id.is_(None), schema.tasks.c.expires_at > now)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [TaskRecord(TaskIdentity.model_validate_json(r[0]), None, None) for r in rows]

    async def revoke_task(self, task_id: str, reason: str) -> bool:
        """Record the task's end; False when it had already ended (idempotent)."""
        try:
            async with self.engine.begin() as conn:
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
        except SQLAlchemyError as exc:
            raise StorageError(f"revocation failed: {exc}") from exc
        return True

    async def call_counts(self, task_id: str) -> dict[str, int]:
        query = (
            select(schema.evidence.c.status, func.count())
            .where(schema.evidence.c.task_id == task_id, schema.evidence.c.kind == "call")
            .group_by(schema.evidence.c.status)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {str(status): int(count) for status, count in rows}

    # -- evidence ---------------------------------------------------------------------

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
                "record": json.dumps(record, separators=(",", ":"), default=str),
                "created_at": time.time(),
            },
        )

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

    # -- idempotency ------------------------------------------------------------------

    async def idempotent_result(self, task_id: str, tool: str, key: str) -> str | None:
        idem = schema.idempotency
        query = select(idem.c.result).where(
            idem.c.task_id == task_id, idem.c.tool == tool, idem.c.key == key
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else str(row[0])

    @staticmethod
    def idempotency_row(
        task_id: str, tool: str, key: str, call_id: str, result_json: str
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
            },
        )

    # -- artifacts --------------------------------------------------------------------

    async def put_artifact(
        self, identity: TaskIdentity, data: bytes, *, name: str, media_type: str
    ) -> ArtifactRef:
        artifact_id = new_id("art")
        rel = Path("artifacts") / identity.org_id / identity.task_id / artifact_id
        path = self.data_dir / rel
        await asyncio.to_thread(_write_file, path, data)
        ref = ArtifactRef(
            id=artifact_id,
            task_id=identity.task_id,
            org_id=identity.org_id,
            name=name[:256],
            media_type=media_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            path=str(rel),
        )
        await self.commit(
            [
                (
                    schema.artifacts,
                    {
                        "id": ref.id,
                        "task_id": ref.task_id,
                        "org_id": ref.org_id,
                        "name": ref.name,
                        "media_type": ref.media_type,
                        "size": ref.size,
                        "sha256": ref.sha256,
                        "path": ref.path,
                        "created_at": time.time(),
                    },
                )
            ]
        )
        return ref

    async def get_artifact(self, artifact_id: str) -> ArtifactRef:
        art = schema.artifacts
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(art).where(art.c.id == artifact_id))).first()
        if row is None:
            raise NotFound("no such artifact")
        return ArtifactRef(
            id=row.id,
            task_id=row.task_id,
            org_id=row.org_id,
            name=row.name,
            media_type=row.media_type,
            size=row.size,
            sha256=row.sha256,
            path=row.path,
        )

    async def read_artifact(self, ref: ArtifactRef) -> bytes:
        data = await asyncio.to_thread((self.data_dir / ref.path).read_bytes)
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise StorageError("artifact bytes do not match their recorded sha256")
        return data


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
