"""The task browser: one isolated Playwright context per task, behind an origin guard.

The names below are loaded when first asked for: the guard's own process
(`guard_worker.py`) runs modules of this package and must not load Playwright with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .extension import install
    from .pool import BrowserPool
    from .processes import BrowserProcesses

__all__ = ["BrowserPool", "BrowserProcesses", "install"]

_WHERE = {"install": ".extension", "BrowserPool": ".pool", "BrowserProcesses": ".processes"}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(where, __name__), name)
