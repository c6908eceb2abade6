"""Artifacts in a real S3-compatible bucket (moto's server), read back through the gateway's
own HTTP route: content-addressed objects written before their rows, owner-scoped and
streamed reads checked against the sha256, a clear 502 for a lost object, and a per-task
quota."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from gateway.core.errors import ArtifactMissing, StorageError
from gateway.core.identity import TaskIdentity
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.store.objects import CHUNK_BYTES
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.conftest import Live, LiveFactory
from tests.store.conftest import PREFIX, Bucket


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def key_of(data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    return f"{PREFIX}/sha256/{sha[:2]}/{sha}"


async def identity_of(live: Live, task: dict[str, Any]) -> TaskIdentity:
    return (await live.gateway.tasks.get(task["task_id"])).identity


async def stream_body(live: Live, path: str) -> tuple[int, bytes, Exception | None]:
    """An answer read as it arrives: its status, the bytes that came, and what cut it short."""
    received = bytearray()
    async with live.http.stream("GET", path, headers=live.control) as streamed:
        try:
            async for chunk in streamed.aiter_raw():
                received += chunk
        except httpx.TransportError as exc:
            return streamed.status_code, bytes(received), exc
    return streamed.status_code, bytes(received), None


class Keep(BaseModel):
    text: str


def with_keep_tool(gw: Gateway) -> None:
    async def keep(ctx: ToolContext, args: Keep) -> dict[str, Any]:
        ref = await gw.store.put_artifact(
            ctx.identity, args.text.encode(), name="kept.txt", media_type="text/plain"
        )
        return ref.public()

    gw.registry.add(Tool("t.keep", "Keep", "Keep a text", Keep, keep, scopes=frozenset({"ui"})))


async def test_an_artifact_goes_to_the_bucket_and_streams_back(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    data = os.urandom(2 * CHUNK_BYTES + 1234)  # three chunks, the last a short one
    async with live_factory(s3_settings) as live:
        task = await live.create_task()
        ref = await live.gateway.store.put_artifact(
            await identity_of(live, task), data, name="trace.zip", media_type="application/zip"
        )
        # The bytes are in the bucket under their content's name, and nowhere on disk.
        assert bucket.keys() == [key_of(data)]
        assert bucket.get(key_of(data)) == data
        assert ref.path == key_of(data)
        assert not any(p.is_file() for p in (s3_settings.data_dir / "artifacts").rglob("*"))

        response = await live.http.get(
            f"/v1/artifacts/{ref.id}", headers=bearer(task["tokens"]["agent"])
        )
        assert response.status_code == 200
        assert response.content == data
        assert response.headers["content-length"] == str(len(data))
        assert response.headers["content-type"] == "application/zip"
        assert response.headers["x-content-sha256"] == hashlib.sha256(data).hexdigest()
        assert response.headers["content-disposition"] == f'attachment; filename="{ref.id}"'
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"

        # The store hands the bytes on a chunk at a time, never the whole object at once.
        chunks = [c async for c in await live.gateway.store.stream_artifact(ref)]
        assert [len(c) for c in chunks] == [CHUNK_BYTES, CHUNK_BYTES, 1234]
        assert await live.gateway.store.read_artifact(ref) == data


async def test_identical_bytes_are_one_object(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    same, other = b"the same screenshot", b"another screenshot"
    async with live_factory(s3_settings) as live:
        a = await live.create_task(org="org_a")
        b = await live.create_task(org="org_b")
        store = live.gateway.store
        first = await store.put_artifact(
            await identity_of(live, a), same, name="1.png", media_type="image/png"
        )
        second = await store.put_artifact(
            await identity_of(live, b), same, name="2.png", media_type="image/png"
        )
        third = await store.put_artifact(
            await identity_of(live, a), other, name="3.png", media_type="image/png"
        )
        assert len({first.id, second.id, third.id}) == 3
        assert first.path == second.path != third.path
        assert bucket.keys() == sorted([key_of(same), key_of(other)])
        # Two rows, each its owner's, both reading the one object.
        for task, ref in ((a, first), (b, second)):
            response = await live.http.get(
                f"/v1/artifacts/{ref.id}", headers=bearer(task["tokens"]["agent"])
            )
            assert response.content == same

        # A copy the bucket already holds (and checksummed) is not even sent again: this
        # one, placed with a mark of its own, keeps it through the gateway's put.
        marked = b"placed beforehand"
        bucket.put(
            key_of(marked),
            marked,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=base64.b64encode(hashlib.sha256(marked).digest()).decode(),
            Metadata={"placed-by": "the test"},
        )
        await store.put_artifact(
            await identity_of(live, a), marked, name="4.png", media_type="image/png"
        )
        assert bucket.metadata(key_of(marked)) == {"placed-by": "the test"}


async def test_the_object_is_written_before_its_row(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    data = b"bytes whose row never lands"
    async with live_factory(s3_settings) as live:
        task = await live.create_task()
        identity = await identity_of(live, task)
        store = live.gateway.store
        # The database refuses every new artifact row, as a full disk or a lost connection
        # would at the commit.
        async with store.engine.begin() as conn:
            await conn.execute(
                text(
                    "CREATE TRIGGER refuse_artifacts BEFORE INSERT ON artifacts "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            )
        with pytest.raises(StorageError):
            await store.put_artifact(identity, data, name="n.txt", media_type="text/plain")
        # The object was stored first; no row refers to it (an orphan, never a dangling row).
        assert bucket.keys() == [key_of(data)]
        assert await store.artifacts_of(identity.org_id, identity.task_id) == []

        async with store.engine.begin() as conn:
            await conn.execute(text("DROP TRIGGER refuse_artifacts"))
        ref = await store.put_artifact(identity, data, name="n.txt", media_type="text/plain")
        assert bucket.keys() == [key_of(data)]  # the orphan is the object the row now uses
        response = await live.http.get(f"/v1/artifacts/{ref.id}", headers=live.control)
        assert response.content == data


async def test_another_tasks_token_gets_404(
    s3_settings: Settings, live_factory: LiveFactory
) -> None:
    async with live_factory(s3_settings) as live:
        owner = await live.create_task(org="org_a")
        same_org = await live.create_task(org="org_a")
        other_org = await live.create_task(org="org_b")
        ref = await live.gateway.store.put_artifact(
            await identity_of(live, owner), b"owner's secret", name="s", media_type="text/plain"
        )
        for stranger in (same_org, other_org):
            response = await live.http.get(
                f"/v1/artifacts/{ref.id}", headers=bearer(stranger["tokens"]["agent"])
            )
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
            assert "owner's secret" not in response.text
        for headers in (bearer(owner["tokens"]["agent"]), live.control):
            response = await live.http.get(f"/v1/artifacts/{ref.id}", headers=headers)
            assert response.content == b"owner's secret"


async def test_a_deleted_object_answers_502_artifact_missing(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    async with live_factory(s3_settings) as live:
        task = await live.create_task()
        identity = await identity_of(live, task)
        lost = await live.gateway.store.put_artifact(
            identity, b"soon gone", name="a", media_type="text/plain"
        )
        kept = await live.gateway.store.put_artifact(
            identity, b"still here", name="b", media_type="text/plain"
        )
        bucket.delete(lost.path)

        response = await live.http.get(
            f"/v1/artifacts/{lost.id}", headers=bearer(task["tokens"]["agent"])
        )
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["code"] == "artifact_missing"
        assert lost.id in error["message"]
        assert error["details"] == {"artifact_id": lost.id}
        assert "Traceback" not in response.text
        with pytest.raises(ArtifactMissing):
            await live.gateway.store.read_artifact(lost)
        # Only that artifact is affected.
        response = await live.http.get(f"/v1/artifacts/{kept.id}", headers=live.control)
        assert response.content == b"still here"


async def test_a_tampered_object_fails_its_sha256(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    small = b"a small artifact"
    large = os.urandom(3 * CHUNK_BYTES)
    async with live_factory(s3_settings) as live:
        task = await live.create_task()
        identity = await identity_of(live, task)
        store = live.gateway.store
        small_ref = await store.put_artifact(identity, small, name="s", media_type="text/plain")
        large_ref = await store.put_artifact(identity, large, name="l", media_type="image/png")
        longer_ref = await store.put_artifact(identity, b"twelve bytes", name="x", media_type="a/b")

        # The same length, other bytes: a small object is checked before the answer starts.
        bucket.put(small_ref.path, small.upper())
        response = await live.http.get(f"/v1/artifacts/{small_ref.id}", headers=live.control)
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "storage_failed"
        assert "sha256" in error["message"]
        assert small_ref.id in error["message"]

        # Another length: refused before the first byte, whatever the object's size.
        bucket.put(longer_ref.path, b"twelve bytes and more")
        response = await live.http.get(f"/v1/artifacts/{longer_ref.id}", headers=live.control)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "storage_failed"

        # A large one, altered in its first chunk: the answer has started when the mismatch
        # shows, so it is cut short; the reader never gets the whole (wrong) object.
        bucket.put(large_ref.path, b"X" + large[1:])
        status, received, ended = await stream_body(live, f"/v1/artifacts/{large_ref.id}")
        assert status == 200
        assert isinstance(ended, httpx.RemoteProtocolError)
        assert 0 < len(received) < len(large)
        with pytest.raises(StorageError, match="sha256"):
            await store.read_artifact(large_ref)

        # Storing the genuine bytes again puts them back: the key names the content.
        await store.put_artifact(identity, large, name="l2", media_type="image/png")
        assert bucket.get(large_ref.path) == large
        response = await live.http.get(f"/v1/artifacts/{large_ref.id}", headers=live.control)
        assert response.content == large


async def test_the_artifact_quota_refuses_the_next_one_and_keeps_the_rest(
    s3_settings: Settings, live_factory: LiveFactory, bucket: Bucket
) -> None:
    settings = s3_settings.model_copy(update={"max_artifacts_per_task": 2})
    async with live_factory(settings, setup=with_keep_tool) as live:
        task = await live.create_task()
        identity = await identity_of(live, task)
        pipeline = live.gateway.pipeline
        kept = []
        for word in ("one", "two"):
            result = await pipeline.call(identity, "t.keep", {"text": word}, door=Door.MCP)
            assert result.status == "succeeded"
            kept.append(result.output["artifact_id"])

        refused = await pipeline.call(identity, "t.keep", {"text": "three"}, door=Door.MCP)
        assert refused.status == "denied"
        assert refused.error is not None
        assert refused.error.code == "quota_exceeded"
        assert refused.error.details == {"limit": 2, "current": 2}
        assert "2" in refused.error.message
        # Its bytes were never sent; the two before it are still there and readable.
        assert bucket.keys() == sorted([key_of(b"one"), key_of(b"two")])
        for artifact_id, word in zip(kept, ("one", "two"), strict=True):
            response = await live.http.get(
                f"/v1/artifacts/{artifact_id}", headers=bearer(task["tokens"]["agent"])
            )
            assert response.content == word.encode()

        # The quota is the task's: another task still stores, and calls at once cannot all
        # pass the same count.
        other = await identity_of(live, await live.create_task())
        results = await asyncio.gather(
            *(
                pipeline.call(other, "t.keep", {"text": f"at once {i}"}, door=Door.MCP)
                for i in range(6)
            )
        )
        assert sorted(r.status for r in results) == ["denied"] * 4 + ["succeeded"] * 2
        assert len(await live.gateway.store.artifacts_of(other.org_id, other.task_id)) == 2
