"""A real S3-compatible server for the artifact tests: moto's server, in a process of its own
on a loopback port for the session, a fresh bucket per test, and AWS credentials that are
dummies (moto accepts any) so nothing of the developer's own AWS setup is ever used."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from gateway.serving import free_port
from gateway.settings import Settings
from gateway.testing import test_settings

REGION = "us-east-1"
START_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server started for the session."""
    log_path = tmp_path_factory.mktemp("moto") / "server.log"
    with log_path.open("wb") as log:
        process, endpoint = _start_moto(log)
        try:
            yield endpoint
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _start_moto(log: Any) -> tuple[subprocess.Popen[bytes], str]:
    # The port is free when asked and taken a moment later: another process may win it in
    # between, so a server that dies at once is started again on another.
    for _ in range(3):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{endpoint}/moto-api/", timeout=1).status_code == 200:
                    return process, endpoint
            time.sleep(0.1)
        process.kill()
        process.wait()
    raise RuntimeError(f"moto's S3 server did not start (its log: {log.name})")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials in the standard variables; the developer's profile, config files
    and endpoint overrides out of reach."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Bucket:
    """A bucket of the test's own, and a client to look into it behind the gateway's back."""

    name: str
    client: Any

    def keys(self) -> list[str]:
        answer = self.client.list_objects_v2(Bucket=self.name)
        return sorted(item["Key"] for item in answer.get("Contents", []))

    def get(self, key: str) -> bytes:
        data: bytes = self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
        return data

    def put(self, key: str, data: bytes, **extra: Any) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data, **extra)

    def metadata(self, key: str) -> dict[str, str]:
        found: dict[str, str] = self.client.head_object(Bucket=self.name, Key=key)["Metadata"]
        return found

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.name, Key=key)


@pytest.fixture
def bucket(s3_endpoint: str, aws_env: None) -> Iterator[Bucket]:
    client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint, region_name=REGION)
    name = f"artifacts-{secrets.token_hex(6)}"
    client.create_bucket(Bucket=name)
    try:
        yield Bucket(name, client)
    finally:
        client.close()


PREFIX = "gw/artifacts"


@pytest.fixture
def s3_settings(tmp_path: Path, s3_endpoint: str, bucket: Bucket) -> Settings:
    """A test gateway whose artifacts go to the test's bucket, under PREFIX."""
    return test_settings(
        tmp_path / "data",
        artifacts_url=f"s3://{bucket.name}/{PREFIX}",
        artifacts_endpoint_url=s3_endpoint,
    )
