"""The evidence writer under load, on both stores: what it writes arrives as it was given,
calls finishing together share a commit, a call is turned away before it runs when its
record could not be stored before its deadline, and what was accepted is never lost.

"Slow" here is real: another connection holds SQLite's write lock, or a PostgreSQL
session holds a `LOCK TABLE` on the evidence, while the gateway works.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import generate_latest
from pydantic import BaseModel
from sqlalchemy import make_url, select

from gateway.mcp_door.rendering import model_text
from gateway.registry import Tool, ToolContext
from gateway.results import Door, ErrorCode, ToolStatus
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.store import schema, writer
from gateway.store.database import Store
from gateway.testing import live_gateway
from gateway.testing.agents import bridge_client
from gateway.testing.control import GatewayTask
from gateway.tokens import Purpose
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


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.01)


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
