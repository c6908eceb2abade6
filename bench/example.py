"""The example app's product tools, against the operations they wrap.

Goals (p50, this machine):
- a read tool (`evals.read_progress`) costs its backend read plus the pipeline, nothing more:
  under 1 ms over the direct store read;
- a tool that asks the tab and then the backend (`dashboard.read_view`) stays within 2x
  of the bare tab round trip (`ui.read_view`), in real Chromium;
- the whole first workflow through the MCP client, then through the page's WebMCP tools
  (simulated evaluation time set to zero), is reported per operation, for the record.

Run: `python -m bench.example`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.report import summary, write
from examples.synthetic_app.models import RunRequest
from examples.synthetic_app.serve import running_stack
from examples.synthetic_app.store import who
from examples.synthetic_app.workflow import (
    mcp_door,
    open_assistant,
    run_workflow,
    sign_in,
    webmcp_door,
)
from gateway.browser.chromium import find_chromium, launch_args
from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.testing import test_settings

MS = 1e3


async def _paired(
    base: Callable[[], Awaitable[Any]], measured: Callable[[], Awaitable[Any]], rounds: int
) -> tuple[list[float], list[float]]:
    """Both operations in alternation, after a warm-up, so load drifts hit both alike."""
    for _ in range(max(3, rounds // 10)):
        await base()
        await measured()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, out in ((base, samples[0]), (measured, samples[1])):
            t0 = time.perf_counter()
            await fn()
            out.append(time.perf_counter() - t0)
    return samples


def _row(name: str, samples: list[float], base: list[float] | None = None) -> dict[str, Any]:
    s = summary(samples)
    row: dict[str, Any] = {"measure": name, "p50 ms": s["p50"] * MS, "p99 ms": s["p99"] * MS}
    if base is not None:
        b = summary(base)
        row["overhead p50 ms"] = (s["p50"] - b["p50"]) * MS
        row["ratio p50"] = s["p50"] / b["p50"]
    return row


async def measure(
    rounds: int = 300, tab_rounds: int = 100, workflows: int = 3
) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = test_settings(Path(tmp), example=True)
        async with running_stack(settings, step_s=0.0) as stack, async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=find_chromium(), args=launch_args(webmcp=True)
            )
            try:
                page = await browser.new_page()
                await sign_in(page, stack.dashboard_url, "ada")
                token = await open_assistant(page, stack, "ada")
                identity = await stack.gateway.tasks.authenticate(token, Purpose.AGENT)
                w = who("org_acme", "ada")
                store = stack.dashboard.store
                agent_id = (await store.list_agents(w))[0]["id"]
                suite_id = (await store.list_suites(w))[0]["id"]
                run = await stack.dashboard.start_run(
                    w, RunRequest(agent_id=agent_id, suite_id=suite_id)
                )
                while not (await store.get_run(w, run["run_id"]))["terminal"]:
                    await stack.dashboard.engine.wait_changed(0.5)

                async def direct() -> None:
                    await store.get_run(w, run["run_id"])

                async def piped() -> None:
                    result = await stack.gateway.pipeline.call(
                        identity, "evals.read_progress", {"run_id": run["run_id"]}, door=Door.MCP
                    )
                    assert result.ok, result

                base, tool = await _paired(direct, piped, rounds)
                rows.append(_row("store read of a run (baseline)", base))
                rows.append(_row("evals.read_progress through the pipeline", tool, base))

                async def tab_only() -> None:
                    result = await stack.gateway.pipeline.call(
                        identity, "ui.read_view", {}, door=Door.MCP
                    )
                    assert result.ok, result

                async def product_view() -> None:
                    result = await stack.gateway.pipeline.call(
                        identity, "dashboard.read_view", {}, door=Door.MCP
                    )
                    assert result.ok, result

                tab_base, view = await _paired(tab_only, product_view, tab_rounds)
                rows.append(_row("ui.read_view, tab round trip (baseline)", tab_base))
                rows.append(_row("dashboard.read_view (tab + org-scoped lookup)", view, tab_base))

                per_op: dict[str, list[float]] = {}
                async with mcp_door(stack.gateway_url, token) as door:
                    for _ in range(workflows):
                        steps = await run_workflow(stack, page, door, user="ada")
                        assert all(s.ok for s in steps), [s.observable for s in steps]
                        for s in steps:
                            per_op.setdefault(f"workflow via MCP: {s.operation}", []).append(
                                s.seconds
                            )
                # The same workflow through the page's native WebMCP tools, for the door chart.
                for _ in range(workflows):
                    steps = await run_workflow(stack, page, webmcp_door(page), user="ada")
                    assert all(s.ok for s in steps), [s.observable for s in steps]
                    for s in steps:
                        per_op.setdefault(f"workflow via WebMCP: {s.operation}", []).append(
                            s.seconds
                        )
                for name, samples in per_op.items():
                    rows.append(_row(name, samples))
            finally:
                await browser.close()
    return rows


def main() -> None:
    rows = asyncio.run(measure())
    path = write(
        "example",
        rows,
        {"goals": {"read tool overhead p50 ms": 1.0, "dashboard.read_view ratio p50": 2.0}},
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
