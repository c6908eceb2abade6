"""The database's disk fills up: clear errors, the gateway stays up, nothing accepted is lost."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import task_body
from tests.faults.process import CONTROL_KEY, GatewayProcess

CONTROL = {"authorization": f"Bearer {CONTROL_KEY}"}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.timeout(300)
def test_a_full_disk_fails_writes_clearly_and_the_gateway_recovers(
    gateway: GatewayProcess,
) -> None:
    with httpx.Client(base_url=gateway.base_url, headers=CONTROL, timeout=10) as http:
        accepted = [http.post("/v1/tasks", json=task_body()).json()["task_id"] for _ in range(3)]
        # Files of the gateway may now grow by only a few KiB: the WAL fills at once.
        wal = gateway.data_dir / "gateway.db-wal"
        limit = wal.stat().st_size + 8 * 1024
        # Only the soft limit: lifting it again later needs no privilege.
        resource.prlimit(gateway.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        failures = []
        for _ in range(200):
            response = http.post("/v1/tasks", json=task_body())
            if response.status_code != 201:
                failures.append(response)
                break
            accepted.append(response.json()["task_id"])
        assert failures, "the file-size limit never bit"
        assert failures[0].status_code == 503
        assert failures[0].json()["error"]["code"] == "storage_failed"
        assert failures[0].json()["error"]["retryable"] is True
        assert http.get("/healthz").status_code == 200

        resource.prlimit(
            gateway.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )
        after = http.post("/v1/tasks", json=task_body())
        assert after.status_code == 201
        for task_id in accepted:
            assert http.get(f"/v1/tasks/{task_id}").json()["status"] == "active"
