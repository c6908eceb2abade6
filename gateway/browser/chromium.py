"""Finding and launching Chromium the same way everywhere (pool, tests, demo, bench).

Order: the `GATEWAY_BROWSER_EXECUTABLE` setting, Playwright's own installed Chromium, then
a system Chromium. As root Chromium needs `--no-sandbox`; the background-networking flags
keep it from calling out on machines whose network is closed.

Feature switches need care: Chromium applies only the last `--enable-features` and the last
`--disable-features` on its command line, and Playwright puts its own of each before the
caller's arguments. A switch of ours therefore repeats Playwright's features, and
`dropped_features` tells, from a launched browser's command line, what would have been lost.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterable, Sequence
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


# Playwright 1.65's own feature switches (its `chromiumSwitches`, as read off a browser it
# launched). The pin on playwright in pyproject keeps these true; `dropped_features` checks.
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
PLAYWRIGHT_ENABLED_FEATURES = ("CDPScreenshotNewSurface", "SkipListAccountsWithoutGaiaCookies")
_ENABLE = "--enable-features="
_DISABLE = "--disable-features="


def launch_args(
    *,
    webmcp: bool = False,
    extra: Iterable[str] = (),
    disable_features: Iterable[str] = (),
    sandboxed: bool = False,
) -> list[str]:
    """Chromium's arguments: ours, `extra`, and one switch of each feature kind at most,
    which also carries Playwright's features of that kind and any in `extra`.

    `sandboxed`: the browser will not run as root (the task browser's jail sees to it), so
    Chromium keeps its own sandbox; otherwise root gets `--no-sandbox`, which it needs."""
    args = list(BASE_ARGS)
    if not sandboxed and hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")
    enabled = ["WebMCP"] if webmcp else []
    disabled = list(disable_features)
    for arg in extra:
        if arg.startswith(_ENABLE):
            enabled += _names(arg)
        elif arg.startswith(_DISABLE):
            disabled += _names(arg)
        else:
            args.append(arg)
    if enabled:
        args.append(_ENABLE + ",".join(_union(PLAYWRIGHT_ENABLED_FEATURES, enabled)))
    if disabled:
        args.append(_DISABLE + ",".join(_union(PLAYWRIGHT_DISABLED_FEATURES, disabled)))
    return args


def dropped_features(command_line: Sequence[str]) -> dict[str, list[str]]:
    """Features an earlier switch names that the last switch of its kind, the one Chromium
    applies, does not: `{"--disable-features=": [...], ...}`, empty when nothing is lost."""
    dropped: dict[str, list[str]] = {}
    for prefix in (_ENABLE, _DISABLE):
        switches = [_names(arg) for arg in command_line if arg.startswith(prefix)]
        if len(switches) > 1:
            applied = set(switches[-1])
            lost = [n for names in switches[:-1] for n in names if n not in applied]
            if lost:
                dropped[prefix] = _union(lost)
    return dropped


def _names(switch: str) -> list[str]:
    return [name for name in switch.split("=", 1)[1].split(",") if name]


def _union(*groups: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(name for group in groups for name in group))
