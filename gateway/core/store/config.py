"""What the store is built from: one frozen object, made from `Settings` in gateway/parts.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The database to open, where its files live and the store's own limits."""

    url: str
    data_dir: Path
    # SQLite's `synchronous` pragma (upper-cased when the store is built).
    synchronous: str = "NORMAL"
    max_artifacts_per_task: int = 1000
