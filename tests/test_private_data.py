"""What the gateway keeps on disk is its own, and kept lean: the data dir is 0700 with
0600 files (database, write-ahead log, keys, artifacts, workspaces), and a large input is
kept in evidence as its size and sha256, not as a second copy."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import workspace
from gateway.core.results import Door
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.core_fixtures import new_task, started

RW = ("workspace:read", "workspace:write")
BIG = 192 * 1024


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    settings.control_key = None  # generated into the data dir, like the signing key
    settings.secret_keys = []
    settings.ensure_secrets()
    async for running in started(settings):
        workspace.install(running)
        yield running


def _database_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("gateway.db*"))


async def test_large_writes_are_kept_as_size_and_digest(gw: Gateway) -> None:
    task, _ = await new_task(gw, scopes=RW)
    before = _database_bytes(gw.settings.data_dir)
    bodies = [(f"{i:04d}" * (BIG // 4)) for i in range(20)]
    for i, body in enumerate(bodies):
        wrote = await gw.pipeline.call(
            task, "workspace.write", {"path": f"f{i}.txt", "contents": body}, door=Door.BRIDGE
        )
        assert wrote.ok, wrote
    records = [
        r
        for r in await gw.store.evidence_for(task.org_id, task.task_id)
        if r.get("tool") == "workspace.write"
    ]
    assert [r["input"]["contents"] for r in records] == [
        {"omitted_bytes": BIG, "sha256": hashlib.sha256(b.encode()).hexdigest()} for b in bodies
    ]
    assert [r["input"]["path"] for r in records] == [f"f{i}.txt" for i in range(20)]
    # 20 writes of 192 KiB: a few KiB of evidence, not 3.8 MB of copies.
    assert _database_bytes(gw.settings.data_dir) - before < 20 * BIG // 10
    # The file itself is whole.
    read = await gw.pipeline.call(task, "workspace.read", {"path": "f3.txt"}, door=Door.BRIDGE)
    assert read.ok and read.output["contents"] == bodies[3]


async def test_the_data_dir_is_readable_by_the_gateway_alone(gw: Gateway) -> None:
    task, _ = await new_task(gw, scopes=RW)
    wrote = await gw.pipeline.call(
        task, "workspace.write", {"path": "notes/plan.md", "contents": "plan"}, door=Door.BRIDGE
    )
    assert wrote.ok
    await gw.store.put_artifact(task, b"png", name="shot.png", media_type="image/png")
    data_dir = gw.settings.data_dir
    seen = {"dirs": 0, "files": 0}
    for root, dirs, files in os.walk(data_dir):
        for name in dirs:
            mode = stat.S_IMODE((Path(root) / name).stat().st_mode)
            assert mode == 0o700, (Path(root) / name, oct(mode))
            seen["dirs"] += 1
        for name in files:
            mode = stat.S_IMODE((Path(root) / name).stat().st_mode)
            assert mode == 0o600, (Path(root) / name, oct(mode))
            seen["files"] += 1
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    names = {p.name for p in data_dir.rglob("*")}
    # The walk saw the database and its log, both keys, an artifact and a workspace file.
    assert {"gateway.db", "gateway.db-wal", "secret.key", "control.key", "plan.md"} <= names
    assert seen["files"] >= 7 and seen["dirs"] >= 4
