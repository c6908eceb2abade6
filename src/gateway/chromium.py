"""Finding and launching Chromium the same way everywhere (pool, tests, demo, bench).

Order: the `GATEWAY_BROWSER_EXECUTABLE` setting, Playwright's own installed Chromium, then
a system Chromium. As root Chromium needs `--no-sandbox`; the background-networking flags
keep it from calling out on machines whose network is closed.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

BASE_ARGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--disable-gpu",
    "--disable-dev-shm-usage",
)


class BrowserNotFound(RuntimeError):
    pass


def find_chromium(configured: str | None = None) -> str:
    candidates: list[str] = []
    if configured or os.environ.get("GATEWAY_BROWSER_EXECUTABLE"):
        candidates.append(configured or os.environ["GATEWAY_BROWSER_EXECUTABLE"])
    cache = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or str(Path.home() / ".cache/ms-playwright")
    candidates += sorted(glob.glob(f"{cache}/chromium-*/chrome-linux*/chrome"), reverse=True)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise BrowserNotFound("no Chromium found: set GATEWAY_BROWSER_EXECUTABLE or install chromium")


def launch_args(*, webmcp: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    args = list(BASE_ARGS)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")
    if webmcp:
        args.append("--enable-features=WebMCP")
    args.extend(extra)
    return args
