"""The evidence writer under load, on both stores: what it writes arrives as it was given,
calls finishing together share a commit, a call is turned away before it runs when its
record could not be stored before its deadline, what was accepted is never lost, a caller
whose rows cannot be stored fails alone, and a dropped PostgreSQL connection is reopened.

"Slow" here is real: another connection holds SQLite's write lock, or a PostgreSQL
session holds a `LOCK TABLE` on the evidence, while the gateway works.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import generate_latest
from pydantic import BaseModel
from sqlalchemy import make_url, select

from gateway.core.errors import StorageError
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.core.store import schema, writer
from gateway.core.store.config import StoreConfig
from gateway.core.store.database import Store, sqlite_url
from gateway.core.tokens import Purpose
from gateway.mcp_door.rendering import model_text
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.testing import live_gateway
from gateway.testing.agents import bridge_client
from gateway.testing.control import GatewayTask
from gateway.testing.waiting import until
from tests.core_fixtures import new_task, started

BOUND_S = 60.0  # a wait in the test that should end soon; only a broken gateway hits it
QUICK_DEADLINE_S = 0.5


@pytest.fixture
def settings(store_settings: Settings) -> Settings:
    """Every test of this module runs on SQLite and on PostgreSQL."""
    return store_settings


class Note(BaseModel):
    text: str = ""


class Ran:
    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
async def gw(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Gateway]:
    # SQLite's writer gives up waiting for a lock after this, then tries again: a hold
    # longer than it must not lose what was accepted.
    monkeypatch.setattr(writer, "BUSY_TIMEOUT_MS", 50)
    async for gateway in started(settings):
        yield gateway


def install(gw: Gateway, ran: Ran) -> None:
    async def note(_ctx: ToolContext, args: Note) -> dict[str, Any]:
        ran.count += 1
        return {"noted": args.text}

    gw.registry.add(Tool("t.note", "Note", "Notes", Note, note, scopes=frozenset({"ui"})))
    gw.registry.add(
        Tool(
            "t.quick",
            "Quick",
            "A short deadline",
            Note,
            note,
            scopes=frozenset({"ui"}),
            timeout_s=QUICK_DEADLINE_S,
        )
    )


@contextlib.contextmanager
def evidence_locked(settings: Settings) -> Iterator[None]:
    """Another client holds the evidence table against writes until the block ends."""
    url = settings.resolved_database_url()
    if url.startswith("sqlite"):
        database = make_url(url).database
        assert database is not None
        conn = sqlite3.connect(database, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")  # the write lock, held
        try:
            yield
        finally:
            conn.rollback()
            conn.close()
    else:
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(plain) as pg:
            pg.execute("LOCK TABLE evidence IN EXCLUSIVE MODE")  # reads pass, writes wait
            try:
                yield
            finally:
                pg.rollback()


def shed_count(gw: Gateway) -> float:
    for line in generate_latest(gw.metrics.registry).decode().splitlines():
        if line.startswith('gateway_calls_shed_total{resource="evidence"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_call_the_writer_could_not_record_in_time_is_turned_away_before_it_runs(
    gw: Gateway, settings: Settings
) -> None:
    ran = Ran()
    install(gw, ran)
    ident, _ = await new_task(gw)
    assert (await gw.pipeline.call(ident, "t.quick", {}, door=Door.MCP)).ok
    ran.count = 0

    with evidence_locked(settings):
        # Accepted while the store is free: it runs, and its record waits for the lock.
        accepted = asyncio.ensure_future(
            gw.pipeline.call(ident, "t.note", {"text": "kept"}, door=Door.MCP)
        )
        await until(lambda: ran.count == 1, "the accepted call ran")
        await until(
            lambda: gw.store.commit_wait() >= QUICK_DEADLINE_S,
            "the writer is further behind than the short deadline",
        )
        turned = await asyncio.wait_for(
            gw.pipeline.call(ident, "t.quick", {"text": "late"}, door=Door.MCP), BOUND_S
        )

        assert turned.status is ToolStatus.UNAVAILABLE
        assert turned.error is not None and turned.error.code == ErrorCode.OVERLOADED
        assert turned.error.retryable
        assert turned.error.details is not None and turned.error.details["retry_after_s"] >= 1
        assert ran.count == 1  # its tool never ran
        assert not accepted.done()  # answered while the accepted call still waits
        assert shed_count(gw) == 1
        # The MCP door tells the model when to retry.
        hint = turned.error.details["retry_after_s"]
        assert f"retryable: yes; retry after {hint} s" in model_text(turned).splitlines()

    # The accepted call is answered once its record is stored; nothing was lost.
    kept = await asyncio.wait_for(accepted, BOUND_S)
    assert kept.ok and kept.output == {"noted": "kept"}
    # Anything queued now is committed after the refusal's record (the writer keeps order).
    await asyncio.wait_for(gw.store.enqueue([]), BOUND_S)
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert len(records) == 3
    assert [(r["tool"], r["status"]) for r in records[1:]] == [
        ("t.note", "succeeded"),
        ("t.quick", "unavailable"),
    ]
    # Once the queue has drained, the same call gets in, and the refusal was not charged.
    again = await gw.pipeline.call(ident, "t.quick", {"text": "now"}, door=Door.MCP)
    assert again.ok
    assert await gw.store.usage(ident.task_id) == (3, 0)


async def test_calls_finishing_together_share_one_commit(gw: Gateway) -> None:
    ran = Ran()
    install(gw, ran)
    ident, _ = await new_task(gw)
    await gw.pipeline.call(ident, "t.note", {}, door=Door.MCP)
    before = gw.store.batches
    results = await asyncio.gather(
        *(gw.pipeline.call(ident, "t.note", {"text": str(i)}, door=Door.MCP) for i in range(64))
    )
    assert all(r.ok for r in results)
    # The first may go in alone while the writer is idle; the other 63 share a batch.
    assert gw.store.batches - before <= 2
    assert len(await gw.store.evidence_for(ident.org_id, ident.task_id)) == 65


# Values that a row-by-row path and a bulk path (PostgreSQL's COPY) must both keep as they
# are: the separators and escapes of COPY's text format, quotes, NULLs, non-ASCII.
AWKWARD = [
    "tab\there",
    "line\nbreak\r\n",
    "back\\slash \\N \\.",
    "quote ' and \"",
    "",
    "ünïcødé ✓ 𝄞",
    "\\",
    ",;|",
]


async def test_a_batch_keeps_every_value_as_it_was_given(gw: Gateway) -> None:
    rows = []
    for i, text in enumerate(AWKWARD * 8):
        rows.append(
            Store.evidence_row(
                record_id=f"evt_awkward_{i}",
                task_id="task_awkward",
                org_id="org_a",
                kind="event",
                record={"text": text, "n": i},
                tool=text[:100] or None,
                error_code=None,
                charged=bool(i % 2),
            )
        )
    # One turn of the loop: one batch of 64 rows, the bulk path.
    await asyncio.gather(*(gw.store.commit([row]) for row in rows))
    stored = await gw.store.evidence_for("org_a", "task_awkward", limit=100)
    assert [(r["text"], r["n"]) for r in stored] == [(t, i) for i, t in enumerate(AWKWARD * 8)]
    ev = schema.evidence
    async with gw.store.engine.connect() as conn:
        columns = (
            await conn.execute(
                select(ev.c.tool, ev.c.error_code, ev.c.charged)
                .where(ev.c.task_id == "task_awkward")
                .order_by(ev.c.seq)
            )
        ).all()
    assert [tuple(c) for c in columns] == [
        (t or None, None, i % 2) for i, t in enumerate(AWKWARD * 8)
    ]


async def test_the_bridge_answers_503_at_once_when_the_evidence_store_is_behind(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "BUSY_TIMEOUT_MS", 50)
    ran = Ran()
    async with live_gateway(settings, setup=lambda gw: install(gw, ran)) as live:
        body = await live.create_task(scopes=["ui"])
        token = body["tokens"]["bridge"]
        task = GatewayTask(body["task_id"], "org", "actor", "role", body["tokens"], body)
        client = bridge_client(live.base_url, task)
        assert (await client.call("t.quick", {})).ok
        ident = await live.gateway.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
        ran.count = 0
        with evidence_locked(settings):
            accepted = asyncio.ensure_future(
                live.gateway.pipeline.call(ident, "t.note", {"text": "kept"}, door=Door.MCP)
            )
            await until(lambda: ran.count == 1, "the accepted call ran")
            await until(
                lambda: live.gateway.store.commit_wait() >= QUICK_DEADLINE_S,
                "the writer is further behind than the short deadline",
            )
            request = client.request("t.quick", {"text": "late"})
            # Answered while the store is still held: the answer waits for nothing stored.
            response = await asyncio.wait_for(
                live.http.post(
                    "/v1/parent-tools",
                    json=request.wire(),
                    headers={"authorization": f"Bearer {token}"},
                ),
                BOUND_S,
            )
            assert not accepted.done()  # the lock is still held
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "overloaded"
        assert int(response.headers["retry-after"]) >= 1
        assert ran.count == 1  # the late call ran nothing
        assert (await asyncio.wait_for(accepted, BOUND_S)).ok


def crafted(record_id: str, *, tool: str = "t.crafted") -> tuple[Any, dict[str, Any]]:
    return Store.evidence_row(
        record_id=record_id,
        task_id="task_crafted",
        org_id="org_a",
        kind="event",
        record={"id": record_id},
        tool=tool,
    )


@pytest.mark.parametrize("rows_per_call", [1, 3])
@pytest.mark.parametrize("bad", ["duplicate id", "NUL"])
async def test_a_caller_whose_rows_cannot_be_stored_fails_alone(
    gw: Gateway, bad: str, rows_per_call: int
) -> None:
    """Four callers share one batch and one of them brings a row the database refuses: the
    other three are stored and answered. One row each is a small batch (on SQLite, the
    event loop's own commit); three each is the writer thread's, on both stores."""
    await gw.store.commit([crafted("evt_taken")])
    bad_caller = 2

    def rows_of(caller: int) -> list[tuple[Any, dict[str, Any]]]:
        rows = [crafted(f"evt_{caller}_{n}") for n in range(rows_per_call)]
        if caller == bad_caller:
            rows[-1] = (
                crafted("evt_taken") if bad == "duplicate id" else crafted("evt_nul", tool="x\0")
            )
        return rows

    # The first commit of a turn may go in alone while the writer is idle: the four that
    # follow it in the same turn share a batch.
    outcomes = await asyncio.gather(
        gw.store.commit([crafted("evt_first")]),
        *(gw.store.commit(rows_of(caller)) for caller in range(4)),
        return_exceptions=True,
    )

    stored = {r["id"] for r in await gw.store.evidence_for("org_a", "task_crafted", limit=100)}
    good = {f"evt_{c}_{n}" for c in range(4) if c != bad_caller for n in range(rows_per_call)}
    assert good <= stored
    refused = bad == "duplicate id" or not gw.store.is_sqlite  # SQLite's text keeps a NUL
    if refused:
        assert [type(o) for o in outcomes] == [type(None)] * 3 + [StorageError, type(None)]
        # Nothing of the failing caller is stored, not even its good rows.
        assert not {f"evt_{bad_caller}_{n}" for n in range(rows_per_call)} & stored
        assert "evt_nul" not in stored
    else:
        assert outcomes == [None] * 5
    # The writer goes on: the next call is stored.
    await gw.store.commit([crafted("evt_after")])
    assert "evt_after" in {r["id"] for r in await gw.store.evidence_for("org_a", "task_crafted")}


async def test_two_callers_of_one_batch_with_the_same_id_store_the_first(gw: Gateway) -> None:
    outcomes = await asyncio.gather(
        gw.store.commit([crafted("evt_first")]),
        gw.store.commit([crafted("evt_a"), crafted("evt_twice")]),
        gw.store.commit([crafted("evt_twice"), crafted("evt_b")]),
        gw.store.commit([crafted("evt_c")]),
        return_exceptions=True,
    )
    assert [type(o) for o in outcomes] == [type(None), type(None), StorageError, type(None)]
    stored = [r["id"] for r in await gw.store.evidence_for("org_a", "task_crafted")]
    assert sorted(stored) == ["evt_a", "evt_c", "evt_first", "evt_twice"]


async def test_an_unknown_tool_name_with_a_nul_is_denied_and_recorded(gw: Gateway) -> None:
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "x\0\x07", {}, door=Door.MCP)
    assert result.status is ToolStatus.DENIED
    assert result.error is not None and result.error.code == ErrorCode.UNKNOWN_TOOL
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert [(r["tool"], r["status"]) for r in records if r.get("tool")] == [
        ("x\\x00\\x07", "denied")
    ]


def plain_postgres_url(settings: Settings) -> str:
    url = settings.resolved_database_url()
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# A PostgreSQL session is what a server restart ends: this one is PostgreSQL's alone.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_the_writer_connects_again_after_postgresql_dropped_it(
    gw: Gateway, settings: Settings
) -> None:
    ran = Ran()
    install(gw, ran)
    ident, _ = await new_task(gw)
    assert (await gw.pipeline.call(ident, "t.note", {"text": "before"}, door=Door.MCP)).ok

    with psycopg.connect(plain_postgres_url(settings), autocommit=True) as pg:
        pids = [
            row[0]
            for row in pg.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                (writer.PG_APPLICATION_NAME,),
            )
        ]
        assert len(pids) == 1  # the writer's own session, told by its name
        pg.execute("SELECT pg_terminate_backend(%s)", (pids[0],))

        def gone() -> bool:
            found = pg.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pids[0],))
            return found.fetchone() is None

        await until(gone, "the writer's session ended")

    after = await gw.pipeline.call(ident, "t.note", {"text": "after"}, door=Door.MCP)
    assert after.ok, after.error
    again = await gw.pipeline.call(ident, "t.note", {"text": "again"}, door=Door.MCP)
    assert again.ok, again.error
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert [r["status"] for r in records if r["tool"] == "t.note"] == ["succeeded"] * 3
    assert gw.store.opened.writer.reconnects == 1


@contextlib.asynccontextmanager
async def sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    """A SQLite store whose next commit goes in on the event loop's thread, if it may."""
    # No checkpoint holds the database's turn while the test looks (the loop's commit
    # would hand over to the thread rather than wait for it).
    monkeypatch.setattr(writer, "CHECKPOINT_QUIET_S", 3600.0)
    async with Store(StoreConfig(sqlite_url(tmp_path), tmp_path, synchronous="NORMAL")) as store:
        # Once the writer's thread has its connection, the loop's own can open without
        # meeting it mid-setup; and the loop commits only once the thread is through all
        # it was handed (it settles a batch's callers a moment before it counts it done).
        await asyncio.wait_for(store.enqueue([]), BOUND_S)
        w = store.opened.writer
        await until(lambda: w._submitted == w._finished, "the writer is idle")
        yield store


async def test_large_records_are_committed_by_the_thread_not_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sqlite_store(tmp_path, monkeypatch) as store:
        w = store.opened.writer
        assert w.inline
        handed = w._submitted
        await store.commit([crafted("evt_small")])
        assert w._submitted == handed  # committed on the loop's thread: nothing handed over
        await asyncio.sleep(0)  # the next turn of the loop
        large = Store.evidence_row(
            record_id="evt_large",
            task_id="task_crafted",
            org_id="org_a",
            kind="event",
            record={"id": "evt_large", "text": "x" * (writer.INLINE_MAX_BYTES + 1)},
        )
        await store.commit([large])
        assert w._submitted == handed + 1  # one row, but too much text for the loop's thread
        stored = await store.evidence_for("org_a", "task_crafted")
        assert [r["id"] for r in stored] == ["evt_small", "evt_large"]


class ClosingChecked:
    """The loop's SQLite connection, noting whether the database's turn was held (no commit
    under way) when it was closed."""

    def __init__(self, conn: sqlite3.Connection, turn: Any) -> None:
        self._conn = conn
        self._turn = turn
        self.closed_while_held: bool | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def close(self) -> None:
        free = self._turn.acquire(blocking=False)
        if free:
            self._turn.release()
        self.closed_while_held = not free
        self._conn.close()


async def test_stopping_the_writer_never_closes_the_loops_connection_mid_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sqlite_store(tmp_path, monkeypatch) as store:
        w = store.opened.writer
        await store.commit([crafted("evt_inline")])
        assert w._inline_conn is not None  # committed on the loop's thread
        checked = ClosingChecked(w._inline_conn, w._turn)
        monkeypatch.setattr(w, "_inline_conn", checked)
    # Left the store: closed.
    assert checked.closed_while_held is True
    # A stopped writer commits nothing more on the loop's thread (nor reopens for it).
    assert w.commit_inline([[crafted("evt_late")]]) is None
    assert w._inline_conn is None
