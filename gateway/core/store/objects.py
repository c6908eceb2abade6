"""Where artifact bytes live: the data dir (the default) or an S3 bucket (`artifacts_url`).

The database keeps an artifact's row (its owner, name, size and sha256); its bytes are an
object here, and the row's `path` column keeps the object's location as this store gave
it. The local store writes one private file per artifact under its owner's folder
(`artifacts/<org>/<task>/<id>`, 0600 in 0700 folders). The S3 store names objects by
content (`<prefix>/sha256/<ab>/<sha256>`): identical bytes are one object, whoever stored
them, and rewriting a key can only ever put the same bytes back.

Both are read as a stream of chunks; the store checks them against the row's sha256. Every
blocking call (a file, boto3) runs in a worker thread: the event loop never waits on a disk
or a bucket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from gateway.core.errors import StorageError
from gateway.core.private_files import write_private

# What one read hands on: large enough that a bucket's round trips do not dominate, small
# enough that a reader never holds much of a large trace in memory.
CHUNK_BYTES = 256 * 1024


class ObjectMissing(LookupError):
    """The object a location names is not there (deleted or never written)."""


@dataclass(frozen=True)
class Placement:
    """What a store may name a new object by: its owner and id, or its content."""

    org_id: str
    task_id: str
    artifact_id: str
    sha256: str


class ObjectReader(Protocol):
    # The length the store reports for the object, before any of it is read.
    size: int

    async def read(self) -> bytes:
        """The next chunk; b"" once the object is exhausted."""
        ...

    def close(self) -> None:
        """Let go of the file or connection (idempotent; quick, so callable anywhere)."""
        ...


class ObjectStore(Protocol):
    async def put(self, placement: Placement, data: bytes) -> str:
        """Store `data` durably and return its location (what the row's `path` keeps)."""
        ...

    async def open(self, location: str) -> ObjectReader:
        """A reader of the object at `location`; `ObjectMissing` if there is none."""
        ...

    async def close(self) -> None: ...


def object_store(data_dir: Path, url: str | None, endpoint_url: str | None) -> ObjectStore:
    """The store `artifacts_url` names: S3 for `s3://bucket/prefix`, else the data dir."""
    if url:
        bucket, prefix = parse_s3_url(url)
        return S3Objects(bucket, prefix, endpoint_url=endpoint_url)
    return LocalObjects(data_dir)


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` as ("bucket", "some/prefix")."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
    return parts.netloc, parts.path.strip("/")


# -- the data dir ---------------------------------------------------------------------


class LocalObjects:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    async def put(self, placement: Placement, data: bytes) -> str:
        rel = Path("artifacts") / placement.org_id / placement.task_id / placement.artifact_id
        try:
            await asyncio.to_thread(write_private, self.data_dir / rel, data)
        except OSError as exc:  # a full disk, most likely
            raise StorageError(f"the artifact could not be stored: {exc.strerror}") from exc
        return str(rel)

    async def open(self, location: str) -> ObjectReader:
        try:
            fh = await asyncio.to_thread(open, self.data_dir / location, "rb")
        except FileNotFoundError as exc:
            raise ObjectMissing(location) from exc
        except OSError as exc:
            raise StorageError(f"an artifact file could not be opened: {exc.strerror}") from exc
        return _FileReader(fh)

    async def close(self) -> None:
        return None


class _FileReader:
    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.size = os.fstat(fh.fileno()).st_size

    async def read(self) -> bytes:
        try:
            return await asyncio.to_thread(self._fh.read, CHUNK_BYTES)
        except OSError as exc:
            raise StorageError(f"an artifact file could not be read: {exc.strerror}") from exc

    def close(self) -> None:
        self._fh.close()


# -- S3 -------------------------------------------------------------------------------


class S3Objects:
    """Objects in a bucket, by content. Credentials and region come from boto3's own
    sources (the AWS_* environment variables, its config files, an instance role)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        # Made on first use, in a worker thread: building a client reads botocore's service
        # models from disk, and a gateway that never stores an artifact needs none.
        self._client: Any = None
        self._lock = threading.Lock()

    def key_of(self, sha256: str) -> str:
        key = f"sha256/{sha256[:2]}/{sha256}"
        return f"{self.prefix}/{key}" if self.prefix else key

    async def put(self, placement: Placement, data: bytes) -> str:
        key = self.key_of(placement.sha256)
        await asyncio.to_thread(self._put, key, data, placement.sha256)
        return key

    async def open(self, location: str) -> ObjectReader:
        answer = await asyncio.to_thread(self._get, location)
        return _S3Reader(location, answer["Body"], int(answer["ContentLength"]))

    async def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            # Its pooled connections to the bucket, closed now rather than when collected.
            await asyncio.to_thread(client.close)

    def _s3(self) -> Any:
        with self._lock:
            if self._client is None:
                # Only a gateway configured for S3 pays for importing these (about 0.3 s).
                import boto3
                from botocore.config import Config

                self._client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=self.endpoint_url,
                    config=Config(retries={"mode": "standard"}),
                )
            return self._client

    def _put(self, key: str, data: bytes, sha256: str) -> None:
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
        s3 = self._s3()
        with _s3_errors(key):
            try:
                head = s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            except ClientError as exc:
                # A missing key is 404, or 403 to a caller without s3:ListBucket (S3 does
                # not say what is not there to whom may not list): either way, send it.
                if _code(exc) not in _MISSING | _FORBIDDEN:
                    raise
                head = {}
        # The same bytes are already there, as the bucket itself checksummed them: one
        # object, nothing to send. Anything else under this key (a partial or altered
        # object, one whose checksum the server did not keep) is written over: the key names
        # the content, so the right bytes are ours.
        if head.get("ChecksumSHA256") == checksum and head.get("ContentLength") == len(data):
            return
        with _s3_errors(key):
            # The bucket checks the body against this checksum, refuses a damaged upload, and
            # keeps it: the next put of the same bytes finds it and sends nothing.
            s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=checksum,
                ContentType="application/octet-stream",
            )

    def _get(self, key: str) -> dict[str, Any]:
        with _s3_errors(key):
            answer: dict[str, Any] = self._s3().get_object(Bucket=self.bucket, Key=key)
        return answer


class _S3Reader:
    def __init__(self, key: str, body: Any, size: int) -> None:
        self._key = key
        self._body = body
        self.size = size

    async def read(self) -> bytes:
        def chunk() -> bytes:
            with _s3_errors(self._key):
                data: bytes = self._body.read(CHUNK_BYTES)
            return data

        return await asyncio.to_thread(chunk)

    def close(self) -> None:
        # An unfinished body's connection is dropped, not returned to the pool half-read.
        self._body.close()


@contextlib.contextmanager
def _s3_errors(key: str) -> Iterator[None]:
    """boto3's errors in the gateway's words: a missing key is `ObjectMissing`; anything
    else (no bucket, refused credentials, no connection) is a `StorageError`."""
    try:
        yield
    except ClientError as exc:
        if _code(exc) in _MISSING:
            raise ObjectMissing(key) from exc
        raise StorageError(
            f"the artifact bucket refused {exc.operation_name}: {_code(exc)}"
        ) from exc
    except (BotoCoreError, OSError) as exc:
        raise StorageError(f"the artifact bucket could not be reached: {exc}") from exc


# How S3 and the servers that speak it name "no such key" (HEAD answers carry no body,
# so only the status) and "not allowed".
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_FORBIDDEN = frozenset({"403", "Forbidden", "AccessDenied"})


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
