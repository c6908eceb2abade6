"""The cluster harness's tools: skipped where a developer has not installed them, required
where `make test` runs (it installs them: scripts/ensure-cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REQUIRE_POSTGRES
from tests.servers.haproxy import HAProxyUnavailable, find_haproxy
from tests.servers.nats import NatsUnavailable, find_nats_server

# `make test` sets it, having run scripts/ensure-postgres and scripts/ensure-cluster: there
# a missing tool is a failure, not a reason to skip.
REQUIRE_TOOLS = REQUIRE_POSTGRES


def _missing(reason: str) -> None:
    if REQUIRE_TOOLS:
        pytest.fail(f"required here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def haproxy_bin() -> Path:
    try:
        return find_haproxy()
    except HAProxyUnavailable as exc:
        _missing(str(exc))
        raise


@pytest.fixture(scope="session")
def nats_bin() -> Path:
    try:
        return find_nats_server()
    except NatsUnavailable as exc:
        _missing(str(exc))
        raise
