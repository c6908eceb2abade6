"""One table of every benchmark's figures, as bench/results/summary.json, and the latency chart.

Each area writes its own rows with its own column names (`p50 ms`, `p50_ms`, `p50 µs`, a
`ratio p50` or a `vs_raw_p50`...). This module reads them back, puts every figure in
milliseconds next to its ratio against the baseline that area measured in the same run, and
draws bench/results/latency.png: latency by door and by concurrent sessions.

Run: `python -m bench.summary` (after the areas ran; `make bench` does both); with
`--markdown` it prints the tables of docs/performance.md instead.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from bench.report import RESULTS, write

# Which column holds an area's ratio against its same-run baseline, first match wins.
# The areas of `make bench`, in the order they run.
ORDER = [
    "core",
    "store",
    "tabs",
    "approvals",
    "webmcp",
    "browser",
    "snapshot",
    "mcp",
    "bridge",
    "example",
    "characters",
    "fixtures",
    "overload",
    "cluster",
    "sandbox",
    "peer",
]
RATIO_KEYS = (
    "ratio p50",
    "vs_raw_p50",
    "ratio p50 vs floor",
    "vs sdk p50",
    "vs_raw",
    "vs_capture_p50",
)
UNITS = {"ms": 1.0, "µs": 1e-3, "s": 1e3}
# What each area's ratio is taken against, in the same run.
BASELINES = {
    "core": "the handler called directly",
    "store": "the same calls on SQLite",
    "tabs": "a raw websocket echo",
    "approvals": "a ui.* tool call, one tab round trip",
    "webmcp": "a bare websocket echo behind a WebMCP tool of the same page",
    "browser": "raw Playwright, same Chromium",
    "snapshot": "Chromium's capture of the same snapshot",
    "mcp": "the bare MCP SDK server",
    "bridge": "pipeline + bare HTTP + artifact write",
    "example": "the operation the tool wraps",
    "fixtures": "a bare page.goto of the same page",
    "overload": "the same calls on an idle gateway",
    "cluster": "the same call made on the task's owner",
    "sandbox": "the same app started directly",
    "peer": "Playwright MCP",
}


def _load(area: str) -> dict[str, Any] | None:
    path = RESULTS / f"{area}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _label(row: dict[str, Any]) -> str:
    if "measure" in row:
        label = str(row["measure"])
    elif "path" in row:
        label = str(row["path"])
    else:
        label = " / ".join(str(row[k]) for k in ("client", "server") if k in row)
    if "sessions" in row:
        label += f" @{row['sessions']}"
    return label


def _ms(row: dict[str, Any], which: str) -> float | None:
    """The row's p50/p99 in milliseconds, whatever unit its column names."""
    for unit, scale in UNITS.items():
        for key in (f"{which} {unit}", f"{which}_{unit}"):
            if isinstance(row.get(key), int | float):
                return float(row[key]) * scale
    # tabs: bare p50/p99 columns, the unit in the row's name
    if isinstance(row.get(which), int | float) and "(ms)" in _label(row):
        return float(row[which])
    return None


def rows_of(area: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in data["rows"]:
        entry: dict[str, Any] = {"area": area, "measure": _label(row)}
        p50, p99 = _ms(row, "p50"), _ms(row, "p99")
        if p50 is None and "value" in row:
            entry["value"] = row["value"]
        if p50 is None and "p50" in row and "ratio" in _label(row):
            entry["ratio"] = row["p50"]  # the row is itself a ratio of two paths
            entry["against"] = BASELINES.get(area)
        if p50 is not None:
            entry["p50 ms"] = p50
            entry["p99 ms"] = p99
        if "peer p50 ms" in row:
            entry["p50 ms"], entry["p99 ms"] = row["gateway p50 ms"], row["gateway p99 ms"]
            entry["peer p50 ms"] = row["peer p50 ms"]
        for key in RATIO_KEYS:
            if isinstance(row.get(key), int | float):
                entry["ratio"] = row[key]
                entry["against"] = BASELINES.get(area, key)
                break
        if "met" in row or "ahead" in row:
            entry["met"] = row.get("met", row.get("ahead"))
        out.append(entry)
    return out


def collect(areas: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {"areas": {}}
    for area in areas:
        data = _load(area)
        if data is None:
            notes["areas"][area] = "no results"
            continue
        rows.extend(rows_of(area, data))
        goal = data.get("notes", {}).get("met")
        notes["areas"][area] = {"at": data.get("at"), "met": goal}
    notes["load average at summary"] = list(os.getloadavg())
    return rows, notes


# -- the chart ------------------------------------------------------------------------------


def _find(rows: list[dict[str, Any]], area: str, startswith: str) -> dict[str, Any] | None:
    for row in rows:
        if row["area"] == area and str(row["measure"]).startswith(startswith):
            return row
    return None


def door_figures(rows: list[dict[str, Any]]) -> list[tuple[str, int, float, float]]:
    """(door, concurrent calls, p50 ms, p99 ms) for the chart's first panel."""
    picks = [
        ("direct pipeline", 1, "core", "pipeline, one call at a time"),
        ("direct pipeline", 64, "core", "pipeline, 64 concurrent"),
        ("MCP", 1, "mcp", "MCP SDK Client.call_tool / gateway"),
        ("MCP (read view)", 1, "example", "workflow via MCP: read current view"),
        ("WebMCP (read view)", 1, "example", "workflow via WebMCP: read current view"),
        ("WebMCP (no-op)", 1, "webmcp", "no-op tool through WebMCP"),
        ("tab channel", 1, "tabs", "UI action round trip"),
        ("bridge", 1, "bridge", "host dispatcher"),
    ]
    out = []
    for door, conc, area, prefix in picks:
        row = _find(rows, area, prefix)
        if row is not None and row.get("p50 ms") is not None:
            out.append((door, conc, row["p50 ms"], row["p99 ms"] or math.nan))
    return out


def session_figures(rows: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """p50 ms of navigate + snapshot per side by concurrent sessions, for the second panel."""
    out: dict[str, dict[int, float]] = {"gateway": {}, "peer": {}}
    for row in rows:
        if row["area"] == "peer" and str(row["measure"]).startswith("navigate + snapshot @"):
            n = int(str(row["measure"]).rsplit("@", 1)[1])
            out["gateway"][n] = row["p50 ms"]
            out["peer"][n] = row["peer p50 ms"]
    return out


def chart(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display here; write the PNG only
    import matplotlib.pyplot as plt

    fig, (doors, sessions) = plt.subplots(1, 2, figsize=(13, 6))
    figures = door_figures(rows)
    labels = [f"{door}, {conc} in flight" for door, conc, _, _ in figures]
    xs = list(range(len(figures)))
    doors.bar([x - 0.2 for x in xs], [f[2] for f in figures], 0.4, label="p50")
    doors.bar([x + 0.2 for x in xs], [f[3] for f in figures], 0.4, label="p99")
    doors.set_xticks(xs, labels, fontsize=8, rotation=30, ha="right")
    doors.set_yscale("log")
    doors.set_ylabel("ms per call (log)")
    doors.set_title("Latency by door")
    doors.legend()

    per_side = session_figures(rows)
    counts = sorted({n for side in per_side.values() for n in side})
    for offset, (side, values) in zip((-0.2, 0.2), per_side.items(), strict=True):
        sessions.bar(
            [i + offset for i in range(len(counts))],
            [values.get(n, math.nan) for n in counts],
            0.4,
            label="gateway" if side == "gateway" else "Playwright MCP",
        )
    sessions.set_xticks(range(len(counts)), [f"{n} session{'s' * (n > 1)}" for n in counts])
    sessions.set_ylabel("ms, p50")
    sessions.set_title("Browser: navigate + snapshot by concurrent sessions")
    sessions.legend()
    many = next(
        (r for r in rows if str(r["measure"]).endswith("navigate+snapshot+click, gateway")), None
    )
    if many is not None:
        tasks = str(many["measure"]).split(" ", 1)[0]
        sessions.annotate(
            f"bench.browser: {tasks} concurrent tasks, navigate+snapshot+click\n"
            f"p50 {many['p50 ms'] / 1e3:.1f} s, {many.get('ratio', math.nan):.2f}x raw Playwright",
            xy=(0.02, 0.9),
            xycoords="axes fraction",
            fontsize=8,
        )
    # Drawn from whatever results are on disk: each area's latest run, not one sitting.
    drawn = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    fig.suptitle(f"bench/results, each area's latest run; drawn {drawn}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary as one Markdown table per area, for docs/performance.md."""
    out: list[str] = []
    for area in dict.fromkeys(r["area"] for r in rows):
        mine = [r for r in rows if r["area"] == area]
        keys = [
            k
            for k in (
                "measure",
                "p50 ms",
                "p99 ms",
                "peer p50 ms",
                "ratio",
                "against",
                "met",
                "value",
            )
            if any(k in r for r in mine)
        ]
        out += [f"### {area}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        out += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in mine]
        out.append("")
    return "\n".join(out)


def main(areas: list[str] | None = None) -> int:
    import sys

    rows, notes = collect(areas or ORDER)
    if "--markdown" in sys.argv[1:]:
        print(markdown(rows))
        return 0
    print("\n== summary: every figure, against its same-run baseline ==")
    write("summary", rows, notes)
    print(f"chart: {chart(rows, RESULTS / 'latency.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
