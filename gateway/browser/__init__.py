"""The task browser: one isolated Playwright context per task, behind an origin guard.

The names below are imported when first asked for, not with the package: gateway/parts.py
(imported by gateway/runtime.py) reads `gateway.browser.config`, and importing the pool
with the package would import the runtime back before it is defined.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .extension import install
    from .pool import BrowserPool
    from .processes import BrowserProcesses

__all__ = ["BrowserPool", "BrowserProcesses", "install"]

_WHERE = {"BrowserPool": ".pool", "BrowserProcesses": ".processes", "install": ".extension"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
