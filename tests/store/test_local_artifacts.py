"""Artifacts in the data dir, the default: one private file per artifact where it always
was, rows that read back after a restart, streamed answers, and the same clear errors as a
bucket's for a lost or altered file."""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from gateway.core.identity import TaskIdentity
from gateway.core.store.objects import CHUNK_BYTES
from gateway.settings import Settings
from tests.conftest import Live, LiveFactory


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def identity_of(live: Live, task: dict[str, Any]) -> TaskIdentity:
    return (await live.gateway.tasks.get(task["task_id"])).identity


def mode(path: os.PathLike[str]) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_a_local_artifact_is_a_private_file_in_its_owners_folder(live: Live) -> None:
    data = os.urandom(CHUNK_BYTES + 10)
    task = await live.create_task(org="org_a")
    ref = await live.gateway.store.put_artifact(
        await identity_of(live, task), data, name="shot.png", media_type="image/png"
    )
    data_dir = live.gateway.settings.data_dir
    assert ref.path == f"artifacts/org_a/{task['task_id']}/{ref.id}"
    path = data_dir / ref.path
    assert path.read_bytes() == data
    assert mode(path) == 0o600
    assert {mode(folder) for folder in (path.parent, path.parent.parent)} == {0o700}

    response = await live.http.get(
        f"/v1/artifacts/{ref.id}", headers=bearer(task["tokens"]["agent"])
    )
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["x-content-sha256"] == hashlib.sha256(data).hexdigest()


async def test_a_local_row_reads_back_after_a_restart(
    settings: Settings, live_factory: LiveFactory
) -> None:
    async with live_factory(settings) as first:
        task = await first.create_task()
        ref = await first.gateway.store.put_artifact(
            await identity_of(first, task), b"kept on disk", name="n", media_type="text/plain"
        )
    async with live_factory(settings) as second:
        response = await second.http.get(f"/v1/artifacts/{ref.id}", headers=second.control)
        assert response.status_code == 200
        assert response.content == b"kept on disk"


async def test_a_missing_local_file_answers_502_artifact_missing(live: Live) -> None:
    task = await live.create_task()
    ref = await live.gateway.store.put_artifact(
        await identity_of(live, task), b"soon gone", name="n", media_type="text/plain"
    )
    (live.gateway.settings.data_dir / ref.path).unlink()
    response = await live.http.get(f"/v1/artifacts/{ref.id}", headers=live.control)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "artifact_missing"
    assert ref.id in error["message"]


async def test_an_altered_local_file_fails_its_sha256(live: Live) -> None:
    task = await live.create_task()
    ref = await live.gateway.store.put_artifact(
        await identity_of(live, task), b"the true bytes", name="n", media_type="text/plain"
    )
    (live.gateway.settings.data_dir / ref.path).write_bytes(b"THE TRUE BYTES")
    response = await live.http.get(f"/v1/artifacts/{ref.id}", headers=live.control)
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "storage_failed"
    assert "sha256" in error["message"]
    assert "THE TRUE" not in response.text
