"""What the browser pool and its processes are built from: frozen objects, made from
`Settings` in gateway/parts.py (so they import no browser code, and nothing above settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class BrowserPoolConfig:
    """How many task contexts, how long they live and how each process admits calls."""

    max_contexts: int = 32
    # Never-used contexts kept ready (at most `max_contexts`).
    warm_contexts: int = 2
    idle_s: float = 300.0
    launch_at_start: bool = True
    snapshot_max_chars: int = 24000
    trace: bool = False
    screenshots: bool = False
    actions_per_process: int = 4
    # 0: snapshots share the actions' lane.
    reads_per_process: int = 8
    # Calls queued per slot of a lane before more are turned away; None: unbounded.
    waiting_per_slot: int | None = None


@dataclass(frozen=True, slots=True)
class BrowserProcessesConfig:
    """Where the pool's browsers come from: Chromium launched here, or remote servers."""

    # Playwright's driver writes here (the ffmpeg it finds for videos).
    data_dir: Path
    processes: int = 1
    # With it, the local slots connect to this server rather than launch a Chromium.
    ws_endpoint: str | None = None
    ws_endpoints: tuple[str, ...] = ()
    network_jail: bool = True
    user: str | None = None
    executable: str | None = None
