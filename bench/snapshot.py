"""What reading a snapshot costs the gateway, against what Chromium spends producing it.

A task's snapshot is Playwright's AI-mode aria snapshot, captured in Chromium's renderer,
then compacted and bounded on the gateway's event loop (`build_snapshot`: passive refs
dropped, links on their line, bare boxes unwrapped, table rows on one line). That second
part runs on the loop that serves every task's tool calls, so it must stay small beside the
first.

Pages: the bench app's page (2 kB of snapshot), and a table of agents of 60 and of 600 rows
(bench/characters.py's app; 600 rows is past the 24 000-character bound, so the whole
snapshot is compacted, then cut). For each page, in one run on one Chromium: the capture
(`page.aria_snapshot(mode="ai")`, p50 of `--rounds`) and `build_snapshot` on that capture
(p50), and their ratio. Goal: building at most 0.1x the capture on every page.

`--compare DIR` also times another source tree's `build_snapshot` on the same captures
(before and after a change to it, in the same run), and checks that both build the same
text.

Run: `python -m bench.snapshot`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.browser import APP_PAGE
from bench.characters import agents_app
from bench.report import summary, write

GOAL = 0.1
MS = 1e3
MAX_CHARS = 24_000
PAGES = (
    ("app page", "/app"),
    ("table, 60 rows", "/agents?rows=60"),
    ("table, 600 rows", "/agents?rows=600"),
)


def source_tree_module(tree: Path) -> ModuleType:
    """`gateway.browser.snapshot` as another source tree has it."""
    path = tree / "gateway" / "browser" / "snapshot.py"
    spec = importlib.util.spec_from_file_location("compared_snapshot", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no snapshot module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def timed_build(build: Callable[..., Any], raw: str, rounds: int) -> tuple[list[float], str]:
    samples = []
    text = ""
    for seq in range(rounds):
        t0 = time.perf_counter()
        text = build(raw, seq=seq, document=1, max_chars=MAX_CHARS).text
        samples.append(time.perf_counter() - t0)
    return samples, text


async def captures(rounds: int) -> list[tuple[str, str, list[float]]]:
    """Each page's aria snapshot and the times Chromium took to capture it."""
    from playwright.async_api import async_playwright
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    from gateway.browser.chromium import find_chromium, launch_args
    from gateway.serving import serving

    app = agents_app()

    async def page(_request: Any) -> HTMLResponse:
        return HTMLResponse(APP_PAGE)

    app.router.routes.append(Route("/app", page))
    found = []
    async with serving(app) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=find_chromium(), args=launch_args())
        tab = await browser.new_page()
        for name, path in PAGES:
            await tab.goto(base + path)
            raw = await tab.aria_snapshot(mode="ai")  # the first one installs the page script
            samples = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                raw = await tab.aria_snapshot(mode="ai")
                samples.append(time.perf_counter() - t0)
            found.append((name, raw, samples))
        await browser.close()
    return found


def measure(rounds: int, compare: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from gateway.browser.snapshot import build_snapshot

    other = source_tree_module(compare) if compare is not None else None
    rows = []
    for name, raw, capture in asyncio.run(captures(rounds)):
        built, text = timed_build(build_snapshot, raw, rounds * 5)
        capture_p50, build_p50 = summary(capture)["p50"], summary(built)["p50"]
        row: dict[str, Any] = {
            "measure": f"build_snapshot, {name}",
            "snapshot chars": len(raw),
            "capture p50 ms": capture_p50 * MS,
            "p50_ms": build_p50 * MS,
            "p99_ms": summary(built)["p99"] * MS,
            "vs_capture_p50": build_p50 / capture_p50,
            "goal": GOAL,
            "met": build_p50 / capture_p50 <= GOAL,
        }
        if other is not None:
            before, before_text = timed_build(other.build_snapshot, raw, rounds * 5)
            row["compared build p50 ms"] = summary(before)["p50"] * MS
            row["compared / build"] = summary(before)["p50"] / build_p50
            row["same text"] = before_text == text
        rows.append(row)
    notes = {
        "rounds": rounds,
        "compared tree": str(compare) if compare is not None else None,
        "met": all(r["met"] for r in rows) and all(r.get("same text", True) for r in rows),
    }
    return rows, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=40, help="captures per page")
    parser.add_argument("--compare", type=Path, default=None, help="another source tree")
    args = parser.parse_args()
    rows, notes = measure(args.rounds, args.compare)
    path = write("snapshot", rows, notes)
    print(f"goal met: {notes['met']}; written to {path}")
    return 0 if notes["met"] else 2


if __name__ == "__main__":
    sys.exit(main())
