"""A real S3-compatible server for the artifact tests: moto's server (tests.servers.s3),
in a process of its own on a loopback port for the session, a fresh bucket per test, and
AWS credentials that are dummies (moto accepts any) so nothing of the developer's own AWS
setup is ever used."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from gateway.settings import Settings
from gateway.testing import test_settings
from tests.servers.s3 import AWS_VARIABLES_TO_DROP, REGION, dummy_aws_env, moto_server


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server started for the session."""
    with moto_server(tmp_path_factory.mktemp("moto") / "server.log") as endpoint:
        yield endpoint


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials in the standard variables; the developer's profile, config files
    and endpoint overrides out of reach."""
    for name, value in dummy_aws_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    for name in AWS_VARIABLES_TO_DROP:
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
