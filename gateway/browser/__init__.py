"""The task browser: one isolated Playwright context per task, behind an origin guard."""

from .extension import install
from .pool import BrowserPool
from .processes import BrowserProcesses

__all__ = ["BrowserPool", "BrowserProcesses", "install"]
