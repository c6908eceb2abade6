"""What the nodes of a cluster agree on, kept in PostgreSQL: which nodes live, which node
owns each task and under which epoch, the side-effect calls under way, and task ends.

Every time here is the database's clock, so nodes on machines whose clocks differ still
agree on who is late. Every change of owner adds one to the task's epoch; a node acts for a
task only under the (node, epoch) it holds, and each side effect is fenced by one guarded
UPDATE of the task's owner row (`fence`), the row that ending the task also changes: a
paused old owner that wakes up finds its epoch gone and does nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, bindparam, cast, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.elements import ColumnElement

from gateway.core.errors import StorageError
from gateway.core.store import schema
from gateway.core.store.repository import Connections

from .owners import Freed, Owner

_NOW = cast(func.extract("epoch", func.clock_timestamp()), Float)


def _held(task_id: Any, node_id: Any, epoch: Any) -> tuple[ColumnElement[bool], ...]:
    """The task's owner row while it names `node_id` at `epoch`: what every write a node
    makes as the task's owner is guarded by."""
    owners = schema.task_owners
    return owners.c.task_id == task_id, owners.c.node_id == node_id, owners.c.epoch == epoch


# The guard a side-effect call's evidence is committed under (the writer compiles it once):
# the row changes only while the task is still this node's, at this epoch.
COMMIT_GUARD = (
    update(schema.task_owners)
    .where(*_held(bindparam("guard_task"), bindparam("guard_node"), bindparam("guard_epoch")))
    .values(changed_at=schema.task_owners.c.changed_at)
)


@dataclass(frozen=True)
class Intent:
    call_id: str
    node_id: str
    epoch: int


@dataclass(frozen=True)
class Ended:
    task_id: str
    revoked_at: float
    reason: str


class Ledger(Connections):
    def __init__(self, url: str, node_id: str) -> None:
        if make_url(url).get_backend_name() != "postgresql":
            raise StorageError("a cluster needs PostgreSQL (GATEWAY_DATABASE_URL=postgresql+...)")
        # Connections of its own, apart from the store's: a node whose calls hold every
        # store connection must still beat, or the others would declare it dead.
        self._engine = create_async_engine(url, pool_size=2, max_overflow=2)
        self.node_id = node_id
        self.incarnation = secrets.token_hex(8)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def close(self) -> None:
        await self._engine.dispose()

    # -- nodes ------------------------------------------------------------------------

    async def join(self) -> list[Freed]:
        """Register this node as live under a new incarnation. Tasks the node id owned
        before (a restart) are freed: what it held for them died with the old process."""
        nodes, owners = schema.nodes, schema.task_owners

        async with self.writing("registering this node in the cluster ledger") as conn:
            row = {
                "node_id": self.node_id,
                "incarnation": self.incarnation,
                "state": "live",
                "started_at": _NOW,
                "beat_at": _NOW,
            }
            statement = pg_insert(nodes).values(row)
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[nodes.c.node_id],
                    set_={k: statement.excluded[k] for k in row if k != "node_id"},
                )
            )
            return await _free(conn, owners.c.node_id == self.node_id)

    async def rejoin(self) -> list[Freed]:
        """Join again as a new incarnation (after being declared dead)."""
        self.incarnation = secrets.token_hex(8)
        return await self.join()

    async def beat(self) -> bool:
        """This node is alive; False when another node has declared it dead meanwhile."""
        nodes = schema.nodes

        async with self.writing("this node's beat in the cluster ledger") as conn:
            result = await conn.execute(
                update(nodes)
                .where(
                    nodes.c.node_id == self.node_id,
                    nodes.c.incarnation == self.incarnation,
                    nodes.c.state == "live",
                )
                .values(beat_at=_NOW)
            )
            return bool(result.rowcount == 1)

    async def leave(self) -> list[Freed]:
        """This node stops: it is no longer live, and its tasks are free for others."""
        nodes, owners = schema.nodes, schema.task_owners

        async with self.writing("leaving the cluster ledger") as conn:
            await conn.execute(
                update(nodes)
                .where(nodes.c.node_id == self.node_id, nodes.c.incarnation == self.incarnation)
                .values(state="left")
            )
            return await _free(conn, owners.c.node_id == self.node_id)

    async def reap(self, dead_after_s: float) -> dict[str, list[Freed]]:
        """Declare dead every live node whose last beat is older than `dead_after_s` and
        free its tasks; returns the dead nodes' freed task ids by node."""
        nodes, owners = schema.nodes, schema.task_owners

        async with self.writing("reaping dead nodes in the cluster ledger") as conn:
            dead = (
                await conn.execute(
                    update(nodes)
                    .where(nodes.c.state == "live", nodes.c.beat_at < _NOW - dead_after_s)
                    .values(state="dead")
                    .returning(nodes.c.node_id)
                )
            ).scalars()
            freed: dict[str, list[Freed]] = {}
            for node in list(dead):
                freed[node] = await _free(conn, owners.c.node_id == node)
            return freed

    # -- owners -----------------------------------------------------------------------

    async def owner(self, task_id: str) -> Owner | None:
        owners = schema.task_owners

        async with self.writing("reading a task's owner in the cluster ledger") as conn:
            query = select(owners.c.node_id, owners.c.epoch, owners.c.revoked).where(
                owners.c.task_id == task_id
            )
            row = (await conn.execute(query)).first()
            return None if row is None else Owner(row.node_id, int(row.epoch), bool(row.revoked))

    async def claim(self, task_id: str, *, take_over: bool) -> Owner:
        """Become the task's owner if nobody holds it (or, `take_over`, whoever does: its
        tab came to this node). Returns the owner after the attempt, which is this node
        unless another holds it (and `take_over` is False) or the task has ended."""
        owners = schema.task_owners

        async with self.writing("claiming a task in the cluster ledger") as conn:
            # The row first (nobody's, epoch 0), then it is locked: two nodes claiming a
            # new task take turns instead of one failing on the other's insert.
            await conn.execute(
                pg_insert(owners)
                .values(task_id=task_id, node_id=None, epoch=0, revoked=0, changed_at=_NOW)
                .on_conflict_do_nothing(index_elements=[owners.c.task_id])
            )
            row = (
                await conn.execute(
                    select(owners.c.node_id, owners.c.epoch, owners.c.revoked, owners.c.browser)
                    .where(owners.c.task_id == task_id)
                    .with_for_update()
                )
            ).one()
            held = Owner(row.node_id, int(row.epoch), bool(row.revoked))
            free = row.node_id is None or (take_over and row.node_id != self.node_id)
            if held.revoked or not free:
                return held
            await conn.execute(
                update(owners)
                .where(owners.c.task_id == task_id)
                .values(node_id=self.node_id, epoch=held.epoch + 1, browser=0, changed_at=_NOW)
            )
            return Owner(self.node_id, held.epoch + 1, False, browser_lost=bool(row.browser))

    async def fence(self, task_id: str, epoch: int, intent: tuple[str, str, str] | None) -> bool:
        """Whether a side effect may start for the task: it is still this node's at
        `epoch` and has not ended, decided by one guarded UPDATE of the owner row. With an
        `intent` (tool, key, call id), the intent is written in the same transaction."""
        owners, intents = schema.task_owners, schema.call_intents

        async with self.writing("fencing a side effect in the cluster ledger") as conn:
            held = await conn.execute(
                update(owners)
                .where(*_held(task_id, self.node_id, epoch), owners.c.revoked == 0)
                .values(changed_at=owners.c.changed_at)
            )
            if held.rowcount != 1:
                return False
            if intent is not None:
                tool, key, call_id = intent
                row = {"call_id": call_id, "node_id": self.node_id, "epoch": epoch}
                statement = pg_insert(intents).values(
                    task_id=task_id, tool=tool, key=key, started_at=_NOW, **row
                )
                await conn.execute(
                    statement.on_conflict_do_update(
                        index_elements=[intents.c.task_id, intents.c.tool, intents.c.key],
                        set_={**row, "started_at": _NOW},
                    )
                )
            return True

    async def browser_opened(self, task_id: str, epoch: int) -> None:
        """This node, the owner at `epoch`, opened the task's browser context."""
        owners = schema.task_owners

        async with self.writing("noting a browser context in the cluster ledger") as conn:
            await conn.execute(
                update(owners).where(*_held(task_id, self.node_id, epoch)).values(browser=1)
            )

    async def intent(self, task_id: str, tool: str, key: str) -> Intent | None:
        intents = schema.call_intents

        async with self.writing("reading a call's intent in the cluster ledger") as conn:
            query = select(intents.c.call_id, intents.c.node_id, intents.c.epoch).where(
                intents.c.task_id == task_id, intents.c.tool == tool, intents.c.key == key
            )
            row = (await conn.execute(query)).first()
            return None if row is None else Intent(row.call_id, row.node_id, int(row.epoch))

    async def outcome(self, record_id: str) -> tuple[bool, str | None]:
        """Whether a call's evidence record is stored, and its error code (None: none)."""
        evidence = schema.evidence

        async with self.writing("looking for a call's record in the cluster ledger") as conn:
            query = select(evidence.c.error_code).where(evidence.c.id == record_id)
            row = (await conn.execute(query)).first()
            return (False, None) if row is None else (True, row.error_code)

    def commit_guard(self, task_id: str, epoch: int) -> tuple[Any, dict[str, Any]]:
        """The guard and its parameters for committing a side effect's evidence."""
        return COMMIT_GUARD, {
            "guard_task": task_id,
            "guard_node": self.node_id,
            "guard_epoch": epoch,
        }

    # -- task ends --------------------------------------------------------------------

    async def revoke(self, task_id: str, _at: float, reason: str) -> bool:
        """End a task: its revocation row and its owner row's `revoked`, in one
        transaction (a fence waits for it, or it waits for the fence). False when it had
        ended already. The time is the database's, which the nodes read ends by."""
        revocations, owners = schema.revocations, schema.task_owners

        async with self.writing("ending a task in the cluster ledger") as conn:
            inserted = await conn.execute(
                pg_insert(revocations)
                .values(task_id=task_id, revoked_at=_NOW, reason=reason[:256])
                .on_conflict_do_nothing(index_elements=[revocations.c.task_id])
            )
            statement = pg_insert(owners).values(
                task_id=task_id, node_id=None, epoch=1, revoked=1, changed_at=_NOW
            )
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[owners.c.task_id], set_={"revoked": 1, "changed_at": _NOW}
                )
            )
            return bool(inserted.rowcount == 1)

    async def ended_since(self, since: float) -> list[Ended]:
        revocations = schema.revocations

        async with self.writing("reading task ends in the cluster ledger") as conn:
            query = select(
                revocations.c.task_id, revocations.c.revoked_at, revocations.c.reason
            ).where(revocations.c.revoked_at >= since)
            return [
                Ended(r.task_id, float(r.revoked_at), r.reason) for r in await conn.execute(query)
            ]

    async def now(self) -> float:
        async with self.writing("reading the cluster ledger's clock") as conn:
            return float((await conn.execute(select(_NOW))).scalar_one())


async def _free(conn: AsyncConnection, which: Any) -> list[Freed]:
    """Let go of the tasks `which` selects. The approvals still pending for them waited on
    the node that held them, whose calls are gone: they end cancelled, in the same
    transaction, so none asked after another node took the task is touched. As with a
    single gateway's sweep at start (`Store.close_orphaned_approvals`), the row's status
    is their record: the node that asked, which would write `approval.closed` and tell
    its tab, is not there to."""
    owners, approvals = schema.task_owners, schema.approvals
    freed = [
        Freed(row.task_id, int(row.epoch))
        for row in await conn.execute(
            update(owners)
            .where(which)
            .values(node_id=None, epoch=owners.c.epoch + 1, changed_at=_NOW)
            .returning(owners.c.task_id, owners.c.epoch)
        )
    ]
    if freed:
        await conn.execute(
            update(approvals)
            .where(
                approvals.c.status == "pending",
                approvals.c.task_id.in_([task.task_id for task in freed]),
            )
            .values(status="cancelled", decided_at=_NOW)
        )
    return freed
