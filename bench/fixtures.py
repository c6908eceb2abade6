"""What the pytest plugin's fixtures add to a test, against what a test without them pays.

- bare: a fresh browser context and page, `page.goto` of the host page until it has loaded
  (what any pytest-playwright test of that page pays);
- dashboard_page: the same, then the handoff of the tab token and the wait for the
  gateway's word that the task's tab is connected (`DashboardPage.open`), with the task
  created through the control plane first (what `gateway_task()` does);
- mcp_agent: an official-SDK MCP session opened for the task and one tool listed.

Goal: a connected `dashboard_page` within 3x the bare `page.goto` at p50. Run:
`python -m bench.fixtures [--rounds N]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import summary, write
from gateway.browser.chromium import find_chromium, launch_args
from gateway.testing.agents import McpAgent
from gateway.testing.control import ControlPlane
from gateway.testing.dashboard import DashboardPage
from gateway.testing.loop_thread import LoopThread
from gateway.testing.served import start_gateway

GOAL = 3.0
MS = 1e3


def run(rounds: int) -> int:
    from playwright.sync_api import sync_playwright

    loop = LoopThread("bench-fixtures")
    with tempfile.TemporaryDirectory() as tmp:
        served = start_gateway(loop, Path(tmp))
        control = ControlPlane(served.base_url, served.control_key)
        samples: dict[str, list[float]] = {"bare": [], "dashboard": [], "task": [], "mcp": []}
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=find_chromium(), args=launch_args(webmcp=True)
                )
                warmup = max(3, rounds // 10)
                for i in range(warmup + rounds):
                    bare, task_s, dashboard = _round(browser, control, served.host_origin)
                    mcp = _mcp(loop, control, served.base_url)
                    if i >= warmup:
                        samples["bare"].append(bare)
                        samples["task"].append(task_s)
                        samples["dashboard"].append(dashboard)
                        samples["mcp"].append(mcp)
                browser.close()
        finally:
            control.close()
            served.stop()
            loop.close()
    stats = {k: summary([s * MS for s in v]) for k, v in samples.items()}
    ratio = stats["dashboard"]["p50"] / stats["bare"]["p50"]
    rows: list[dict[str, Any]] = [
        {"path": "bare page.goto (ms)", **stats["bare"]},
        {"path": "gateway_task(): create the task (ms)", **stats["task"]},
        {"path": "dashboard_page: goto + handoff + connected (ms)", **stats["dashboard"]},
        {"path": "mcp_agent: session + list_tools (ms)", **stats["mcp"]},
        {"path": "dashboard_page / bare goto", "n": rounds, "ratio p50": ratio},
    ]
    met = ratio <= GOAL
    write("fixtures", rows, {"goal": {"p50_ratio_to_bare_goto": GOAL}, "met": met})
    print(f"connected dashboard_page p50 {ratio:.2f}x a bare page.goto: goal {GOAL}x", end=" ")
    print("met" if met else "NOT met")
    return 0 if met else 2


def _round(browser: Any, control: ControlPlane, origin: str) -> tuple[float, float, float]:
    context = browser.new_context()
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(origin + "/")
    bare = time.perf_counter() - t0
    context.close()

    context = browser.new_context()
    page = context.new_page()
    t0 = time.perf_counter()
    task = control.create_task()
    created = time.perf_counter()
    DashboardPage(page, control, task, origin).open()
    done = time.perf_counter()
    context.close()
    control.end_task(task.task_id)
    return bare, created - t0, done - created


def _mcp(loop: LoopThread, control: ControlPlane, base_url: str) -> float:
    task = control.create_task()
    t0 = time.perf_counter()
    agent = McpAgent(loop, base_url, task)
    agent.list_tools()
    spent = time.perf_counter() - t0
    agent.close()
    control.end_task(task.task_id)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=60)
    return run(parser.parse_args().rounds)


if __name__ == "__main__":
    sys.exit(main())
