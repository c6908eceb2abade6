"""Settings of a gateway under test: fixed keys, its own data dir, no example app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.settings import Settings

SECRET_KEYS = ("k-test-newest-0123456789abcdef", "k-test-older-0123456789abcdef")
CONTROL_KEY = "control-key-for-tests-0123456789"


def test_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a test gateway in `data_dir`; the task browser is launched on its first
    use (most tests never open one), with no warm stock of contexts unless a test asks for
    one (a test counts the contexts it opens)."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "secret_keys": list(SECRET_KEYS),
        "control_key": CONTROL_KEY,
        "example": False,
        "browser_launch_at_start": False,
        "browser_warm_contexts": 0,
        **overrides,
    }
    return Settings.model_validate(values)


test_settings.__test__ = False  # type: ignore[attr-defined]  # not a test for pytest
