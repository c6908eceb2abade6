"""Many tasks at once, every door at once: each task has a connected dashboard tab in real
Chromium, its own task browser, and callers on MCP, WebMCP (and the page's own session)
and the parent tool bridge. Every call must end in exactly one contract result, leave
exactly one evidence record, and everything a task held must be released when it ends.

`make test` runs the short version; `make stress` the full one (64 tasks x 200 calls),
which also writes its figures to bench/results/load.json.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from gateway.browser import BrowserPool
from gateway.browser.chromium import find_chromium, launch_args
from gateway.serving import serving
from gateway.tabs import TabHub
from gateway.testing import test_settings
from tests.browser.site import ForeignLog, allowed_app, foreign_app
from tests.conftest import Live, LiveFactory
from tests.load.harness import (
    CALL_BOUND_S,
    CODES,
    CONTRACT,
    Doors,
    Ledger,
    LoadTask,
    call_statuses,
    dashboard_contexts,
    dump,
    percentile,
    rss_bytes,
    seed_workspace,
    settled_rss,
    task_spec,
)
from tests.tabs.dashboard import dashboard_app

pytestmark = [pytest.mark.browser]

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "load.json"
# Released memory is not always handed back to the system (allocator arenas, caches that
# grow to a high-water mark); what must not happen is a leak that grows with the tasks.
RSS_SLACK = 32 * 1024 * 1024


@dataclass(frozen=True)
class Shape:
    tasks: int
    calls: int  # per task, across the three doors
    tab_contexts: int  # browser contexts the dashboard pages share
    browser_processes: int  # Chromium processes of the task browser pool
    idle_calls: int  # made by one task alone first: each door's idle p99


SHORT = Shape(tasks=4, calls=25, tab_contexts=2, browser_processes=1, idle_calls=10)
FULL = Shape(tasks=64, calls=200, tab_contexts=4, browser_processes=2, idle_calls=200)


@dataclass
class Sites:
    app: str
    dashboard: str


@pytest_asyncio.fixture
async def sites() -> AsyncIterator[Sites]:
    async with (
        serving(foreign_app(ForeignLog())) as foreign,
        serving(allowed_app(foreign)) as app,
        serving(dashboard_app()) as dashboard,
    ):
        yield Sites(app, dashboard)


def split(calls: int) -> tuple[int, int, int]:
    """Calls per door: MCP 40 %, the page 30 %, the bridge the rest."""
    mcp, page = calls * 4 // 10, calls * 3 // 10
    return mcp, page, calls - mcp - page


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(SHORT, id="short", marks=pytest.mark.timeout(300)),
        pytest.param(FULL, id="full", marks=[pytest.mark.stress, pytest.mark.timeout(1800)]),
    ],
)
async def test_every_call_ends_once_and_everything_is_released(
    shape: Shape, tmp_path: Path, sites: Sites, live_factory: LiveFactory
) -> None:
    from playwright.async_api import async_playwright

    settings = test_settings(
        tmp_path / "data",
        dashboard_origins=[sites.dashboard],
        max_contexts=shape.tasks + 4,
        browser_processes=shape.browser_processes,
    )
    async with (
        live_factory(settings) as started,
        # A fresh connection per control call: uvicorn closes a connection idle for 5 s, and
        # under this load a reused one can be closed under a request (not what is tested).
        httpx.AsyncClient(
            base_url=started.base_url,
            limits=httpx.Limits(max_keepalive_connections=0),
            timeout=CALL_BOUND_S,
        ) as http,
        async_playwright() as pw,
    ):
        live = Live(started.base_url, started.gateway, http)
        browser = await pw.chromium.launch(
            executable_path=find_chromium(), args=launch_args(webmcp=True)
        )
        try:
            await run(shape, live, sites, browser)
        finally:
            await browser.close()


async def run(shape: Shape, live: Live, sites: Sites, browser: Any) -> None:
    hub = live.gateway.services.get(TabHub)
    pool = live.gateway.services.get(BrowserPool)
    warm = Doors(live.base_url, live.control, Ledger())
    # One task through every door first, so the baseline includes what the first call of
    # each kind loads once (imports, compiled schemas, Chromium's first context).
    async with dashboard_contexts(browser, 1) as [context]:
        await one_round(warm, live, sites, context, LoadTask({}), calls=10)
    await wait_released(live, hub, pool)
    baseline = settled_rss()
    # Then the same mix from one task alone: what each door takes when nothing contends.
    idle = Doors(live.base_url, live.control, Ledger())
    async with dashboard_contexts(browser, 1) as [context]:
        await one_round(idle, live, sites, context, LoadTask({}), calls=shape.idle_calls)
    await wait_released(live, hub, pool)

    ledger = Ledger()
    doors = Doors(live.base_url, live.control, ledger)
    tasks: list[LoadTask] = []
    peak = baseline
    async with dashboard_contexts(browser, shape.tab_contexts) as contexts:
        for _ in range(shape.tasks):
            tasks.append(LoadTask(await live.create_task(**task_spec_kwargs(sites))))
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    doors.open_tab(contexts[i % len(contexts)], sites.dashboard, task)
                    for i, task in enumerate(tasks)
                )
            ),
            CALL_BOUND_S * 4,
        )
        await asyncio.wait_for(
            asyncio.gather(*(seed_workspace(live.base_url, t) for t in tasks)), CALL_BOUND_S
        )
        for task in tasks:
            assert hub.describe(task.task_id)["connected"], task.task_id

        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, rss_bytes())
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        mcp, page, bridge = split(shape.calls)
        # No bound of its own: every call inside is bounded by CALL_BOUND_S.
        await asyncio.gather(
            *(
                worker
                for task in tasks
                for worker in (
                    doors.mcp_worker(task, mcp),
                    doors.page_worker(task, page),
                    doors.bridge_worker(task, bridge),
                )
            )
        )
        sampling = False
        await sampler

        # One evidence record per call, for every task (plus the seeding write).
        timeouts: Counter[str] = Counter()
        waits: dict[str, list[float]] = {}
        per_task = {
            task.task_id: await call_statuses(
                live.http, live.control, task.task_id, timeouts, waits
            )
            for task in tasks
        }
        for task_id, statuses in per_task.items():
            assert statuses.total() == shape.calls + 1, (task_id, statuses)
            assert set(statuses) <= CONTRACT
        for task in tasks:
            await live.end_task(task.task_id)
    await wait_released(live, hub, pool)
    after = settled_rss()

    figures = ledger.figures()
    figures.update(
        tasks=shape.tasks,
        calls_per_task=shape.calls,
        evidence_records=sum(c.total() for c in per_task.values()) - shape.tasks,
        rss_baseline_mib=round(baseline / 2**20, 1),
        rss_peak_mib=round(peak / 2**20, 1),
        rss_after_mib=round(after / 2**20, 1),
        memory_per_task_kib=round((peak - baseline) / shape.tasks / 1024, 1),
        timeouts_recorded=dict(timeouts.most_common(12)),
        idle_doors=idle.ledger.figures()["doors"],
        admitted_p99_vs_idle=ledger.against(idle.ledger),
        # What admitted calls waited in the gateway's queues (the rest of their time is
        # the work itself, on a machine the run keeps busy).
        queue_wait_ms={
            door: {
                "p50": round(percentile(ms, 50), 1),
                "p99": round(percentile(ms, 99), 1),
                "max": round(max(ms), 1),
            }
            for door, ms in sorted(waits.items())
        },
    )
    print("\nload figures:", json.dumps(figures, indent=2))
    if shape is FULL:
        dump(RESULTS, figures)

    # Exactly one terminal result per call, each a contract status, none lost.
    assert figures["calls"] == shape.tasks * shape.calls
    assert figures["lost"] == 0, figures
    assert set(figures["statuses"]) <= CONTRACT, figures["statuses"]
    assert set(figures["codes"]) <= CODES, figures["codes"]
    assert figures["evidence_records"] == figures["calls"]
    # The page's actions and the workspace calls have nothing to contend for: they succeed.
    unexpected = [
        o for o in ledger.outcomes if o.status != "succeeded" and not o.tool.startswith("browser.")
    ]
    assert not unexpected, unexpected[:5]
    # Memory comes back: what stays is well under what the run took (and than a slack).
    assert after - baseline < RSS_SLACK + (peak - baseline) / 2, (baseline, peak, after)


def task_spec_kwargs(sites: Sites) -> dict[str, Any]:
    body = task_spec(sites.app, sites.dashboard)
    return {
        "scopes": body["scopes"],
        "app_origin": sites.app,
        "budget": body["budget"],
    }


async def one_round(
    doors: Doors, live: Live, sites: Sites, context: Any, task: LoadTask, *, calls: int
) -> None:
    task.body = await live.create_task(**task_spec_kwargs(sites))
    await doors.open_tab(context, sites.dashboard, task)
    await seed_workspace(live.base_url, task)
    mcp, page, bridge = split(calls)
    await asyncio.gather(
        doors.mcp_worker(task, mcp),
        doors.page_worker(task, page),
        doors.bridge_worker(task, bridge),
    )
    await live.end_task(task.task_id)


async def wait_released(live: Live, hub: TabHub, pool: BrowserPool) -> None:
    """After the tasks end: no browser context, no tab connection left (bounded wait)."""
    for _ in range(300):
        if pool.live_count() == 0 and hub.connections._value.get() == 0:
            break
        await asyncio.sleep(0.1)
    assert pool.live_count() == 0
    assert hub.connections._value.get() == 0
    assert not hub._links
