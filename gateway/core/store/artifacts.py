"""The store's artifacts: their rows here, their bytes in an object store
(gateway/core/store/objects.py), checked against the recorded sha256 whenever they are read.

A task holds at most `max_artifacts_per_task`; its bytes are stored before its row is
committed, so a crash in between leaves bytes nobody refers to, never a row without bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from gateway.core.errors import ArtifactMissing, NotFound, QuotaExceeded, StorageError
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.store import schema
from gateway.core.store.objects import ObjectMissing, ObjectReader, ObjectStore, Placement
from gateway.core.store.repository import Repository

# A task browser's videos (gateway/browser/video.py) show whatever its pages showed: they
# are for the people at the console, never served to the task's own token.
VIDEO_MEDIA_TYPE = "video/webm"


@dataclass(frozen=True)
class ArtifactRef:
    id: str
    task_id: str
    org_id: str
    name: str
    media_type: str
    size: int
    sha256: str
    path: str

    def public(self) -> dict[str, Any]:
        return {
            "artifact_id": self.id,
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
        }


class ArtifactRows(Repository):
    # Where artifact bytes live, the quota, and one turn at a time per task from the count
    # to the commit (a lock lives while someone holds or awaits it): `Store` sets them.
    objects: ObjectStore
    max_artifacts_per_task: int
    _artifact_locks: weakref.WeakValueDictionary[str, asyncio.Lock]

    async def put_artifact(
        self, identity: TaskIdentity, data: bytes, *, name: str, media_type: str
    ) -> ArtifactRef:
        """Keep `data` as an artifact of the task. Its bytes are stored before its row is
        committed: a crash in between leaves bytes nobody refers to, never a row without
        bytes. Refused (`QuotaExceeded`) once the task holds `max_artifacts_per_task`."""
        # Off the event loop: a trace can be tens of megabytes (hashlib lets go of the GIL).
        sha256 = (await asyncio.to_thread(hashlib.sha256, data)).hexdigest()
        async with self._artifact_slot(identity):
            artifact_id = new_id("art")
            path = await self.objects.put(
                Placement(identity.org_id, identity.task_id, artifact_id, sha256), data
            )
            ref = ArtifactRef(
                id=artifact_id,
                task_id=identity.task_id,
                org_id=identity.org_id,
                name=name[:256],
                media_type=media_type,
                size=len(data),
                sha256=sha256,
                path=path,
            )
            await self.commit(
                [
                    (
                        schema.artifacts,
                        {
                            "id": ref.id,
                            "task_id": ref.task_id,
                            "org_id": ref.org_id,
                            "name": ref.name,
                            "media_type": ref.media_type,
                            "size": ref.size,
                            "sha256": ref.sha256,
                            "path": ref.path,
                            "created_at": time.time(),
                        },
                    )
                ]
            )
        return ref

    @contextlib.asynccontextmanager
    async def _artifact_slot(self, identity: TaskIdentity) -> AsyncIterator[None]:
        """Room for one more artifact of the task, within its quota. A task's puts take turns
        from the count to the commit, so two at once cannot both take the last place. The
        turns are this process's: gateways sharing a database may each let one through."""
        lock = self._artifact_locks.setdefault(identity.task_id, asyncio.Lock())
        async with lock:
            current = await self.artifact_count(identity.org_id, identity.task_id)
            limit = self.max_artifacts_per_task
            if current >= limit:
                raise QuotaExceeded(
                    f"this task already holds {current} artifacts, its limit of {limit}; "
                    "the ones it holds are kept",
                    details={"limit": limit, "current": current},
                )
            yield

    async def artifact_count(self, org_id: str, task_id: str) -> int:
        art = schema.artifacts
        query = select(func.count()).where(art.c.org_id == org_id, art.c.task_id == task_id)
        async with self.reading("counting artifacts") as conn:
            return int((await conn.execute(query)).scalar_one())

    async def get_artifact(self, artifact_id: str) -> ArtifactRef:
        art = schema.artifacts
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(art).where(art.c.id == artifact_id))).first()
        if row is None:
            raise NotFound("no such artifact")
        return _artifact_ref(row)

    async def artifacts_of(
        self, org_id: str, task_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[ArtifactRef]:
        """A task's artifacts, oldest first, scoped by its owner."""
        art = schema.artifacts
        query = (
            select(art)
            .where(art.c.org_id == org_id, art.c.task_id == task_id)
            .order_by(art.c.created_at, art.c.id)
            .offset(offset)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_artifact_ref(row) for row in rows]

    async def read_artifact(self, ref: ArtifactRef) -> bytes:
        """The artifact's bytes, whole, checked against its sha256."""
        return b"".join([chunk async for chunk in await self.stream_artifact(ref)])

    async def stream_artifact(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """The artifact's bytes in chunks, checked against its sha256 on the way.

        The object is opened, and its first chunk read, before this returns: a missing
        object (`ArtifactMissing`), one of the wrong size, or a one-chunk object with the
        wrong bytes fail here, while the caller can still answer with an error. A longer
        object is checked as it streams and its last chunk is handed on only once every byte
        matched: no reader gets the whole of wrong bytes (an HTTP answer ends short)."""
        try:
            reader = await self.objects.open(ref.path)
        except ObjectMissing as exc:
            raise ArtifactMissing(ref.id) from exc
        check = _Check(ref)
        try:
            if reader.size != ref.size:
                raise check.mismatch()
            held = check.take(await reader.read())
            following = check.take(await reader.read()) if held else b""
        except BaseException:
            reader.close()
            raise
        chunks = _checked_chunks(reader, check, held, following)
        # A stream dropped before its first chunk (its reader left first) never runs its
        # `finally`: the object is let go of when the stream is collected, then.
        weakref.finalize(chunks, reader.close)
        return chunks


class _Check:
    """An artifact's bytes, counted and hashed as they pass; the end (an empty chunk) is
    let through only if they are exactly the recorded ones."""

    def __init__(self, ref: ArtifactRef) -> None:
        self.ref = ref
        self._digest = hashlib.sha256()
        self._seen = 0

    def take(self, chunk: bytes) -> bytes:
        self._seen += len(chunk)
        if self._seen > self.ref.size:
            raise self.mismatch()
        if chunk:
            self._digest.update(chunk)
        elif self._seen != self.ref.size or self._digest.hexdigest() != self.ref.sha256:
            raise self.mismatch()
        return chunk

    def mismatch(self) -> StorageError:
        return StorageError(
            f"the bytes of artifact {self.ref.id} do not match their recorded sha256",
            retryable=False,
            details={"artifact_id": self.ref.id},
        )


async def _checked_chunks(
    reader: ObjectReader, check: _Check, held: bytes, following: bytes
) -> AsyncIterator[bytes]:
    # One chunk is always held back: the last is handed on only after the empty read that
    # follows it passed the check.
    try:
        while following:
            yield held
            held, following = following, check.take(await reader.read())
        if held:
            yield held
    finally:
        reader.close()


def _artifact_ref(row: Any) -> ArtifactRef:
    return ArtifactRef(
        id=row.id,
        task_id=row.task_id,
        org_id=row.org_id,
        name=row.name,
        media_type=row.media_type,
        size=row.size,
        sha256=row.sha256,
        path=row.path,
    )
