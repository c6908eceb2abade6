"""Shared fixtures: a real gateway on a loopback port, and a control-plane client.

The gateways come from `gateway.testing`, as the end-to-end suites' and the benches' do;
each checks on its way out that nothing is still held for a task that has ended.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from gateway.settings import Settings
from gateway.testing import LiveGateway, live_gateway, task_body, test_settings
from tests.servers.postgres import Cluster, PostgresUnavailable, throwaway_cluster
from tests.start_costs import once_per_run

__all__ = ["APP_ORIGIN", "Live", "LiveFactory", "once_per_run", "task_body"]

APP_ORIGIN = "http://127.0.0.1:9"

Live = LiveGateway
LiveFactory = Callable[..., contextlib.AbstractAsyncContextManager[LiveGateway]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return test_settings(tmp_path / "data", dashboard_origins=["http://127.0.0.1:8765"])


# -- both stores ---------------------------------------------------------------------------

# Set by `make test` (and so in CI): without PostgreSQL its half fails instead of skipping.
REQUIRE_POSTGRES = os.environ.get("GATEWAY_TEST_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster on loopback for the session."""
    try:
        with throwaway_cluster() as cluster:
            yield cluster
    except PostgresUnavailable as exc:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required here: {exc}")
        pytest.skip(f"the PostgreSQL half needs a PostgreSQL server: {exc}")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """The store under test: SQLite in the data dir (None), or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    cluster: Cluster = request.getfixturevalue("postgres")
    return cluster.new_database()


@pytest.fixture
def store_settings(tmp_path: Path, database_url: str | None) -> Settings:
    """`settings` on each store in turn: a module runs on both by overriding `settings`
    with this one."""
    return test_settings(
        tmp_path / "data",
        dashboard_origins=["http://127.0.0.1:8765"],
        database_url=database_url,
    )


@pytest.fixture
def live_factory() -> LiveFactory:
    """Start gateways on demand: `async with live_factory(settings, setup=...) as live`."""
    return live_gateway


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[LiveGateway]:
    async with live_gateway(settings) as running:
        yield running
