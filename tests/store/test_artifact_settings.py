"""Where artifacts go, as the environment says it: unset or empty is the data dir, an
`s3://` URL a bucket, anything else refused at start rather than at the first artifact."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.core.store.objects import LocalObjects, S3Objects, object_store
from gateway.settings import Settings


def test_unset_or_empty_means_the_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GATEWAY_ARTIFACTS_URL", "")
    settings = Settings(data_dir=tmp_path)
    assert settings.artifacts_url is None
    assert settings.max_artifacts_per_task == 1000
    store = object_store(tmp_path, settings.artifacts_url, settings.artifacts_endpoint_url)
    assert isinstance(store, LocalObjects)


def test_an_s3_url_names_the_bucket_and_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GATEWAY_ARTIFACTS_URL", "s3://team-artifacts/gateway/prod/")
    monkeypatch.setenv("GATEWAY_ARTIFACTS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("GATEWAY_MAX_ARTIFACTS_PER_TASK", "50")
    settings = Settings(data_dir=tmp_path)
    assert settings.max_artifacts_per_task == 50
    store = object_store(tmp_path, settings.artifacts_url, settings.artifacts_endpoint_url)
    assert isinstance(store, S3Objects)
    assert (store.bucket, store.endpoint_url) == ("team-artifacts", "http://127.0.0.1:9000")
    assert store.key_of("ab" + "0" * 62) == "gateway/prod/sha256/ab/ab" + "0" * 62


@pytest.mark.parametrize(
    "url", ["https://bucket/prefix", "s3://", "s3:///prefix", "bucket/prefix", "s3://b/p?x=1"]
)
def test_anything_else_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValidationError, match="artifacts_url"):
        Settings(data_dir=tmp_path, artifacts_url=url)
