"""Migrations on both stores: a database of the first release is brought up to date with its
tasks, evidence and idempotency keys working; two processes starting at once take turns;
the migrated schema is the one the code reads and writes; `gateway db upgrade` says what
it did."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from gateway.core.errors import TokenRevoked
from gateway.core.results import Door
from gateway.core.store import migrate, schema
from gateway.core.tokens import Purpose
from gateway.settings import Settings
from tests.core_fixtures import new_task, started
from tests.first_release import reduce_to_first_release
from tests.test_pipeline import Calls, install_tools


@pytest.fixture
def settings(store_settings: Settings) -> Settings:
    return store_settings


def url_of(settings: Settings) -> str:
    return settings.resolved_database_url()


def tables_and_columns(url: str) -> dict[str, set[str]]:
    engine = create_engine(migrate.sync_url(url))
    try:
        with engine.connect() as conn:
            found = inspect(conn)
            return {t: {c["name"] for c in found.get_columns(t)} for t in found.get_table_names()}
    finally:
        engine.dispose()


async def test_a_first_release_database_is_upgraded_and_keeps_working(
    settings: Settings,
) -> None:
    calls = Calls()
    async for gw in started(settings):
        install_tools(gw, calls)
        live, tokens = await new_task(gw)
        ended, ended_tokens = await new_task(gw, org="org_b")
        first = await gw.pipeline.call(
            live, "t.side", {"text": "a"}, door=Door.BRIDGE, idempotency_key="req-1"
        )
        await gw.tasks.end(ended.task_id)
    url = url_of(settings)
    reduce_to_first_release(url)
    assert "alembic_version" not in tables_and_columns(url)

    async for gw in started(settings):
        install_tools(gw, calls)
        # The task and its tokens, the ended one's revocation, the evidence, the key.
        assert (await gw.tasks.authenticate(tokens["agent"], Purpose.AGENT)) == live
        with pytest.raises(TokenRevoked):
            await gw.tasks.authenticate(ended_tokens["agent"], Purpose.AGENT)
        records = await gw.store.evidence_for(live.org_id, live.task_id)
        assert [r["call_id"] for r in records if r.get("kind") == "call"] == [first.call_id]
        again = await gw.pipeline.call(
            live, "t.side", {"text": "a"}, door=Door.BRIDGE, idempotency_key="req-1"
        )
        assert again.replayed and again.output == first.output
        assert calls.count == 1
        # And what came after the first release works on it.
        assert await gw.approvals.listing(live.task_id) == []
    engine = create_engine(migrate.sync_url(url))
    try:
        with engine.connect() as conn:
            assert migrate.current(conn) == migrate.head()
    finally:
        engine.dispose()


def test_the_migrated_schema_is_the_one_the_code_uses(settings: Settings) -> None:
    url = url_of(settings)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    assert migrate.upgrade(url) == (None, migrate.head())
    found = tables_and_columns(url)
    expected = {t.name: {c.name for c in t.columns} for t in schema.metadata.sorted_tables}
    assert {t: found[t] for t in expected} == expected
    # Again: nothing to do.
    assert migrate.upgrade(url) == (migrate.head(), migrate.head())


def test_two_processes_migrating_at_once_take_turns(settings: Settings) -> None:
    url = url_of(settings)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    program = (
        "import sys; from gateway.core.store.migrate import upgrade; print(upgrade(sys.argv[1]))"
    )
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", program, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(3)
    ]
    outcomes = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0, 0], outcomes
    said = sorted(out.decode().strip() for out, _ in outcomes)
    head = migrate.head()
    # One of them made the tables; the others found them made.
    assert said == [f"('{head}', '{head}')"] * 2 + [f"(None, '{head}')"]


def test_gateway_db_upgrade_says_what_it_did(settings: Settings) -> None:
    url = url_of(settings)
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(settings.data_dir),
        "GATEWAY_DATABASE_URL": settings.database_url or "",
    }
    if not settings.database_url:
        del env["GATEWAY_DATABASE_URL"]
    command = [sys.executable, "-m", "gateway.cli", "db", "upgrade"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert f"upgraded from an empty database to {migrate.head()}" in first.stdout
    reduce_to_first_release(url)
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert f"upgraded from {migrate.FIRST_RELEASE} to {migrate.head()}" in second.stdout
    third = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert "nothing to do" in third.stdout
