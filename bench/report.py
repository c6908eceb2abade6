"""Shared measuring and reporting for the benchmarks: percentiles, a table, a JSON file."""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50": percentile(samples, 50),
        "p99": percentile(samples, 99),
        "mean": statistics.fmean(samples) if samples else float("nan"),
    }


def write(area: str, rows: list[dict[str, Any]], notes: dict[str, Any] | None = None) -> Path:
    """Print `rows` as a table and keep them as bench/results/<area>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    widths = {k: max(len(k), *(len(_fmt(r.get(k))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(_fmt(row.get(k)).ljust(widths[k]) for k in keys))
    path = RESULTS / f"{area}.json"
    path.write_text(
        json.dumps(
            {
                "area": area,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"python": platform.python_version(), "cpus": _cpus()},
                "rows": rows,
                "notes": notes or {},
            },
            indent=2,
        )
    )
    return path


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _cpu_busy_idle() -> tuple[int, int]:
    """The machine's busy and idle CPU time so far, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:8]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, idle


async def cpu_quiet(
    *, below: float = 0.15, window_s: float = 0.25, timeout_s: float = 10.0
) -> None:
    """Wait until the machine's CPU is mostly idle over one window: a new Chromium renderer
    keeps initializing for about half a second after its page is made (measured: 0.5 s of
    CPU time per renderer), and a closed session's processes take a moment to go."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy0, idle0 = _cpu_busy_idle()
        await asyncio.sleep(window_s)
        busy1, idle1 = _cpu_busy_idle()
        total = (busy1 - busy0) + (idle1 - idle0)
        if total > 0 and (busy1 - busy0) / total < below:
            return
