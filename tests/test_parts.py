"""Each part's config is built from the environment variables `Settings` has always read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.errors import StorageError
from gateway.parts import store_config
from gateway.settings import Settings
from gateway.store.config import StoreConfig
from gateway.store.database import Store, sqlite_url


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_DATABASE_URL", "sqlite+aiosqlite:///x.db", "url", "sqlite+aiosqlite:///x.db"),
        ("GATEWAY_DATA_DIR", "/srv/gw", "data_dir", Path("/srv/gw")),
        ("GATEWAY_DB_SYNCHRONOUS", "FULL", "synchronous", "FULL"),
        ("GATEWAY_MAX_ARTIFACTS_PER_TASK", "7", "max_artifacts_per_task", 7),
    ],
)
def test_store_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(store_config(Settings()), field) == expected


def test_store_config_is_frozen(tmp_path: Path) -> None:
    config = StoreConfig("sqlite+aiosqlite:///x.db", tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.url = "other"  # type: ignore[misc]


def test_bad_value_is_refused_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_DB_SYNCHRONOUS", "SOMETIMES")
    with pytest.raises(ValidationError):
        store_config(Settings())


async def test_store_as_context_manager(tmp_path: Path) -> None:
    async with Store(StoreConfig(sqlite_url(tmp_path), tmp_path)) as store:
        assert store.engine is not None
    with pytest.raises(StorageError):
        _ = store.engine
