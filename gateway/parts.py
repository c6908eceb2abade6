"""The one place where each part's config is built from `Settings`.

A part's constructor takes its frozen config (beside the part, e.g. gateway/store/config.py)
rather than the whole `Settings`, so a part can be built and tested without the
environment; the environment variable names stay those of `Settings`.
"""

from __future__ import annotations

from gateway.settings import Settings
from gateway.store.config import StoreConfig


def store_config(settings: Settings) -> StoreConfig:
    """The store's database, data dir, SQLite durability and artifact limit."""
    return StoreConfig(
        url=settings.resolved_database_url(),
        data_dir=settings.data_dir,
        synchronous=settings.db_synchronous,
        max_artifacts_per_task=settings.max_artifacts_per_task,
    )
