"""The store: an async SQLAlchemy engine for reads, and a group-commit writer for evidence.

Evidence of a call must be durable before its result is returned; the writer
(gateway/store/writer.py) commits every record queued while the previous transaction was
committing in one transaction, and each caller awaits the commit of the batch that holds
its record, so nothing is acknowledged before it is stored.

The records asked for in one turn of the event loop form one batch (the calls that finish
together share a commit even when the writer is idle), handed to the writer once the turn
is over. The writer is one thread with a plain (sync) connection: an async engine costs
about 0.6 ms per commit in thread hops on SQLite, and one writer is all SQLite allows at a
time anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    bindparam,
    event,
    func,
    insert,
    make_url,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.errors import ArtifactMissing, NotFound, QuotaExceeded, StorageError
from gateway.identity import TaskIdentity
from gateway.private_files import private_dir, private_file
from gateway.store import migrate, schema
from gateway.store.objects import LocalObjects, ObjectMissing, ObjectReader, ObjectStore, Placement
from gateway.store.writer import Guarded, Part, Pending, Row, Writer, settle, sqlite_pragmas


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


# The evidence table's sequence numbers are an `Integer` column: 32 bits on PostgreSQL. A
# cursor past it is past every record (and is not sent to the database, which refuses it).
SEQ_CEILING = 2**31 - 1

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


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{data_dir / 'gateway.db'}"


@dataclass
class _Turn:
    """The rows asked for in one turn of an event loop, committed together: each caller's
    rows with a future of its own, so a caller whose rows cannot be stored fails alone."""

    parts: list[Part]
    loop: asyncio.AbstractEventLoop


@dataclass(frozen=True)
class IdempotentResult:
    """What a side-effect call under an idempotency key left: its result, to replay."""

    result_json: str
    call_id: str
    input_sha256: str | None  # None for rows kept before inputs were recorded


class Store:
    def __init__(
        self,
        url: str,
        data_dir: Path,
        *,
        synchronous: str = "NORMAL",
        objects: ObjectStore | None = None,
        max_artifacts_per_task: int = 1000,
    ) -> None:
        self.url = url
        self.data_dir = data_dir
        self._synchronous = synchronous.upper()
        self._engine: AsyncEngine | None = None
        self._writer: Writer | None = None
        self._turn: _Turn | None = None  # the rows asked for in this turn of the loop
        # The loop whose current turn already committed on its own thread.
        self._inline_turn: asyncio.AbstractEventLoop | None = None
        # Where artifact bytes live (gateway.store.objects); the rows stay here.
        self.objects: ObjectStore = objects if objects is not None else LocalObjects(data_dir)
        self.max_artifacts_per_task = max_artifacts_per_task
        # One turn at a time per task for storing artifacts (the quota's count); a lock lives
        # while someone holds or awaits it.
        self._artifact_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise StorageError("the store is not started")
        return self._engine

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    async def start(self) -> None:
        private_dir(self.data_dir)
        private_dir(self.data_dir / "artifacts")
        engine = create_async_engine(self.url)
        if self.is_sqlite:
            # SQLite gives its -wal and -shm files the database file's mode.
            for path in _sqlite_files(self.url):
                if path.exists() or path.name.endswith(".db"):
                    private_file(path)
            event.listen(engine.sync_engine, "connect", sqlite_pragmas(self._synchronous))

        # The schema is Alembic's: brought to this release's head before anything is read.
        await asyncio.to_thread(migrate.upgrade, self.url)
        self._engine = engine
        self._writer = Writer(migrate.sync_url(self.url), self._synchronous)
        self._writer.start()

    async def close(self) -> None:
        self._hand_over_turn()
        if self._writer is not None:
            # The writer commits what is queued before it stops: nothing accepted is dropped.
            await asyncio.to_thread(self._writer.stop)
            self._writer = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
        await self.objects.close()

    @property
    def batches(self) -> int:
        """Commits made by the writer, for metrics and benchmarks."""
        return self._writer.batches if self._writer is not None else 0

    # -- group commit -----------------------------------------------------------------

    @property
    def checkpoints(self) -> int:
        """SQLite checkpoints run off the commit path so far (0 on PostgreSQL)."""
        writer = self._writer
        return writer.checkpointer.checkpoints if writer and writer.checkpointer else 0

    def commit_wait(self) -> float:
        """Seconds a record queued now can expect to wait for its commit (0 when the
        writer is idle); a call whose deadline is nearer is turned away before it runs."""
        return self._writer.expected_wait() if self._writer is not None else 0.0

    async def commit(self, rows: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
        """Insert `(table, values)` rows in the next batch; return once it is committed.
        Raises StorageError when these rows cannot be stored: the other callers of the
        batch are stored and answered all the same."""
        if self._writer is None:
            raise StorageError("the store is not started")
        loop = asyncio.get_running_loop()
        turn = self._turn
        mine: list[Row] = [(t, dict(v)) for t, v in rows]
        # The first commit of this turn of the loop: with the writer idle, straight in, with
        # no hop at all; the calls that follow in the same turn share a batch.
        if turn is None and self._inline_turn is not loop:
            outcome = self._writer.commit_inline([mine])
            if outcome is not None:
                self._inline_turn = loop
                loop.call_soon(self._end_inline_turn)
                if outcome[0] is not None:
                    raise outcome[0]
                return
        if turn is None or turn.loop is not loop:
            self._hand_over_turn()
            turn = self._turn = _Turn([], loop)
            loop.call_soon(self._end_turn, turn)
        done: asyncio.Future[None] = loop.create_future()
        turn.parts.append((mine, done))
        await asyncio.shield(done)

    def _end_inline_turn(self) -> None:
        self._inline_turn = None

    def _end_turn(self, turn: _Turn) -> None:
        """The loop's turn is over: commit its rows here when the writer can spare the
        trip (writer.py says when), else hand them to the writer's thread."""
        if self._turn is not turn:
            return  # handed over already, to keep the order of a later change
        self._turn = None
        assert self._writer is not None
        outcomes = self._writer.commit_inline([rows for rows, _done in turn.parts])
        if outcomes is None:
            self._submit_turn(turn)
            return
        for (_rows, done), error in zip(turn.parts, outcomes, strict=True):
            settle(done, error)

    def _hand_over_turn(self) -> None:
        # What the current turn asked for goes to the writer ahead of what comes next: the
        # writer keeps the order of what it is given.
        turn, self._turn = self._turn, None
        if turn is not None:
            self._submit_turn(turn)

    def _submit_turn(self, turn: _Turn) -> None:
        try:
            if self._writer is None:
                raise StorageError("the store is not started")
            self._writer.submit(Pending(turn.parts, turn.loop))
        except StorageError as exc:
            for _rows, done in turn.parts:
                settle(done, exc)

    def enqueue(self, rows: Sequence[tuple[Any, Mapping[str, Any]]]) -> asyncio.Future[None]:
        """Queue `rows` for the next batch now; the future settles once they are committed.
        The writer keeps the order of what is queued: a change queued after this one sees
        these rows."""
        if self._writer is None:
            raise StorageError("the store is not started")
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._writer.submit(Pending([([(t, dict(v)) for t, v in rows], done)], loop))
        return done

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

    async def live_task_count(self, org_id: str, now: float) -> int:
        """How many of `org_id`'s tasks have neither ended nor expired at `now`."""
        query = (
            select(func.count())
            .select_from(
                schema.tasks.outerjoin(
                    schema.revocations, schema.tasks.c.task_id == schema.revocations.c.task_id
                )
            )
            .where(
                schema.tasks.c.org_id == org_id,
                schema.revocations.c.task_id.is_(None),
                schema.tasks.c.expires_at > now,
            )
        )
        try:
            async with self.engine.connect() as conn:
                return int((await conn.execute(query)).scalar_one())
        except SQLAlchemyError as exc:
            raise StorageError(f"counting live tasks failed: {exc}") from exc

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
        out = []
        for seq, record in rows:
            item = json.loads(record)
            item["seq"] = seq
            out.append(item)
        return out

    # -- reads for the console ----------------------------------------------------------

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
            rows = (await conn.execute(query)).all()
        out = []
        for seq, record in rows:
            item = json.loads(record)
            item["seq"] = seq
            out.append(item)
        return out

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
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as exc:
            raise StorageError(f"listing tasks failed: {exc}") from exc
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
        try:
            async with self.engine.connect() as conn:
                call_rows = (await conn.execute(calls)).all()
                pending_rows = (await conn.execute(pending)).all()
        except SQLAlchemyError as exc:
            raise StorageError(f"counting task calls failed: {exc}") from exc
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

    # -- idempotency ------------------------------------------------------------------

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

    # -- approvals --------------------------------------------------------------------

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

    async def commit_if(
        self,
        guard: Any,
        params: Mapping[str, Any],
        rows: Sequence[tuple[Any, Mapping[str, Any]]] = (),
    ) -> bool:
        """Run `guard` (an UPDATE) and, only if it changed exactly one row, insert `rows`,
        in one transaction of the writer; whether it changed one."""
        if self._writer is None:
            raise StorageError("the store is not started")
        self._hand_over_turn()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self._writer.submit(
            Guarded(guard, dict(params), [(t, dict(v)) for t, v in rows], done, loop)
        )
        return await asyncio.shield(done)

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

    # -- artifacts --------------------------------------------------------------------

    async def put_artifact(
        self, identity: TaskIdentity, data: bytes, *, name: str, media_type: str
    ) -> ArtifactRef:
        """Keep `data` as an artifact of the task. Its bytes are stored before its row is
        committed: a crash in between leaves bytes nobody refers to, never a row without
        bytes. Refused (`QuotaExceeded`) once the task holds `max_artifacts_per_task`."""
        # Off the event loop: a trace can be tens of megabytes (hashlib lets go of the GIL).
        sha256 = (await asyncio.to_thread(hashlib.sha256, data)).hexdigest()
        async with self._artifact_slot(identity):
            artifact_id = new_id("art")
            path = await self.objects.put(
                Placement(identity.org_id, identity.task_id, artifact_id, sha256), data
            )
            ref = ArtifactRef(
                id=artifact_id,
                task_id=identity.task_id,
                org_id=identity.org_id,
                name=name[:256],
                media_type=media_type,
                size=len(data),
                sha256=sha256,
                path=path,
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

    @contextlib.asynccontextmanager
    async def _artifact_slot(self, identity: TaskIdentity) -> AsyncIterator[None]:
        """Room for one more artifact of the task, within its quota. A task's puts take turns
        from the count to the commit, so two at once cannot both take the last place. The
        turns are this process's: gateways sharing a database may each let one through."""
        lock = self._artifact_locks.setdefault(identity.task_id, asyncio.Lock())
        async with lock:
            current = await self.artifact_count(identity.org_id, identity.task_id)
            limit = self.max_artifacts_per_task
            if current >= limit:
                raise QuotaExceeded(
                    f"this task already holds {current} artifacts, its limit of {limit}; "
                    "the ones it holds are kept",
                    details={"limit": limit, "current": current},
                )
            yield

    async def artifact_count(self, org_id: str, task_id: str) -> int:
        art = schema.artifacts
        query = select(func.count()).where(art.c.org_id == org_id, art.c.task_id == task_id)
        try:
            async with self.engine.connect() as conn:
                return int((await conn.execute(query)).scalar_one())
        except SQLAlchemyError as exc:
            raise StorageError(f"counting artifacts failed: {exc}") from exc

    async def get_artifact(self, artifact_id: str) -> ArtifactRef:
        art = schema.artifacts
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(art).where(art.c.id == artifact_id))).first()
        if row is None:
            raise NotFound("no such artifact")
        return _artifact_ref(row)

    async def artifacts_of(
        self, org_id: str, task_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[ArtifactRef]:
        """A task's artifacts, oldest first, scoped by its owner."""
        art = schema.artifacts
        query = (
            select(art)
            .where(art.c.org_id == org_id, art.c.task_id == task_id)
            .order_by(art.c.created_at, art.c.id)
            .offset(offset)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_artifact_ref(row) for row in rows]

    async def read_artifact(self, ref: ArtifactRef) -> bytes:
        """The artifact's bytes, whole, checked against its sha256."""
        return b"".join([chunk async for chunk in await self.stream_artifact(ref)])

    async def stream_artifact(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """The artifact's bytes in chunks, checked against its sha256 on the way.

        The object is opened, and its first chunk read, before this returns: a missing
        object (`ArtifactMissing`), one of the wrong size, or a one-chunk object with the
        wrong bytes fail here, while the caller can still answer with an error. A longer
        object is checked as it streams and its last chunk is handed on only once every byte
        matched: no reader gets the whole of wrong bytes (an HTTP answer ends short)."""
        try:
            reader = await self.objects.open(ref.path)
        except ObjectMissing as exc:
            raise ArtifactMissing(ref.id) from exc
        check = _Check(ref)
        try:
            if reader.size != ref.size:
                raise check.mismatch()
            held = check.take(await reader.read())
            following = check.take(await reader.read()) if held else b""
        except BaseException:
            reader.close()
            raise
        chunks = _checked_chunks(reader, check, held, following)
        # A stream dropped before its first chunk (its reader left first) never runs its
        # `finally`: the object is let go of when the stream is collected, then.
        weakref.finalize(chunks, reader.close)
        return chunks


class _Check:
    """An artifact's bytes, counted and hashed as they pass; the end (an empty chunk) is
    let through only if they are exactly the recorded ones."""

    def __init__(self, ref: ArtifactRef) -> None:
        self.ref = ref
        self._digest = hashlib.sha256()
        self._seen = 0

    def take(self, chunk: bytes) -> bytes:
        self._seen += len(chunk)
        if self._seen > self.ref.size:
            raise self.mismatch()
        if chunk:
            self._digest.update(chunk)
        elif self._seen != self.ref.size or self._digest.hexdigest() != self.ref.sha256:
            raise self.mismatch()
        return chunk

    def mismatch(self) -> StorageError:
        return StorageError(
            f"the bytes of artifact {self.ref.id} do not match their recorded sha256",
            retryable=False,
            details={"artifact_id": self.ref.id},
        )


async def _checked_chunks(
    reader: ObjectReader, check: _Check, held: bytes, following: bytes
) -> AsyncIterator[bytes]:
    # One chunk is always held back: the last is handed on only after the empty read that
    # follows it passed the check.
    try:
        while following:
            yield held
            held, following = following, check.take(await reader.read())
        if held:
            yield held
    finally:
        reader.close()


def _artifact_ref(row: Any) -> ArtifactRef:
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


def _sqlite_files(url: str) -> list[Path]:
    """The database file of a SQLite URL, and its write-ahead log and shared memory."""
    database = make_url(url).database
    if not database or database == ":memory:":
        return []
    path = Path(database)
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
