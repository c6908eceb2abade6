"""Where a navigate's time goes at N sessions: the same page loads, layer by layer.

N pages load the app's page at once, round after round, each way in turn:

1. raw Playwright on a Chromium outside any jail, no proxy (the floor);
2. the same Chromium with each context behind its own guard proxy on the gateway's
   loopback (what the guard alone costs);
3. the jailed Chromium (its own network namespace, Chromium's own sandbox on) with each
   context behind its guard, reached through the jail's socket (the guard and the jail);
4. the gateway's `browser.navigate` tool on tasks of that jailed Chromium (besides the
   above: admission, the settle, the snapshot it returns, evidence). A call turned away as
   `overloaded` is made again after the time it names, as the contract asks of a client.

For each: p50 and p99 of a load, the CPU per load of this Python process (where the tools
run, and the guard when it runs on the gateway's loop), of the guard's own process (when
the guard runs in one, `GATEWAY_BROWSER_GUARD_PROCESS`) and of the Chromium tree (from
/proc), the upstream connections the guard opened per load, and, from a profiled pass of
the same loads, the share of this process's CPU spent in the guard's code. Pages: the
bench app's page (one document) and `/heavy` (a document with 40 scripts, styles and
images, as a real app's first load has).

With `--first-loads N`, instead: N first navigations of fresh tasks to `/heavy`, one at
a time, on a gateway with a warm stock of contexts, alternating with raw Playwright's
first load of a fresh page of a fresh context (goal: none slower than 3x raw's p99;
`bench/results/first-loads.json`).

Run: `python -m bench.navigate [--sessions 8] [--rounds 8]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.browser import Bench, app_process, guard_pid
from bench.report import cpu_quiet, summary, write
from gateway.browser.memory import process_tree

MS = 1e3
GUARD_MODULES = ("guard_proxy", "http_relay", "jail", "upstream.py", "guard_process", "guard_wire")


def chromium_cpu_s(pid: int) -> float:
    """User + system CPU of a browser's process tree so far."""
    return sum(process_cpu_s(child) for child in process_tree(pid))


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU of one process so far (0 for none)."""
    if pid is None:
        return 0.0
    with contextlib.suppress(OSError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


Load = Callable[[int], Awaitable[None]]  # load the page in session i


async def rounds_of(load: Load, sessions: int, rounds: int) -> list[float]:
    times: list[float] = []

    async def one(i: int) -> None:
        for _ in range(rounds):
            t0 = time.perf_counter()
            await load(i)
            times.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(i) for i in range(sessions)))
    return times


async def measure(
    name: str,
    load: Load,
    sessions: int,
    rounds: int,
    chromium_pid: int,
    connections: Callable[[], Awaitable[int]],
    guard_pid: int | None,
) -> dict[str, Any]:
    await asyncio.gather(*(load(i) for i in range(sessions)))  # renderers up, not counted
    await cpu_quiet()
    opened0, py0 = await connections(), time.process_time()
    cr0, gp0 = chromium_cpu_s(chromium_pid), process_cpu_s(guard_pid)
    times = await rounds_of(load, sessions, rounds)
    opened1, py1 = await connections(), time.process_time()
    cr1, gp1 = chromium_cpu_s(chromium_pid), process_cpu_s(guard_pid)
    loads = len(times)
    # A profiled pass of its own: the profiler's overhead stays out of the figures above.
    await cpu_quiet()
    profile = cProfile.Profile()
    profile.enable()
    await rounds_of(load, sessions, max(1, rounds // 2))
    profile.disable()
    stats = pstats.Stats(profile)
    guard = sum(
        row[2]  # tottime: time in the function's own code
        for key, row in stats.stats.items()  # type: ignore[attr-defined]
        if any(module in key[0] for module in GUARD_MODULES)
    )
    total = stats.total_tt  # type: ignore[attr-defined]
    s = summary(times)
    return {
        "measure": name,
        "p50_ms": s["p50"] * MS,
        "p99_ms": s["p99"] * MS,
        "python_cpu_ms_per_load": (py1 - py0) * MS / loads,
        "chromium_cpu_ms_per_load": (cr1 - cr0) * MS / loads,
        "guard_process_cpu_ms_per_load": (gp1 - gp0) * MS / loads,
        "upstream_connections_per_load": (opened1 - opened0) / loads,
        "guard_share_of_python_cpu": guard / total if total else 0.0,
    }


async def run(sessions: int, rounds: int, paths: list[str]) -> int:
    from gateway.browser import BrowserPool
    from gateway.browser.guards import ContextGuard
    from gateway.browser.jail import open_guard
    from gateway.core.tokens import Purpose

    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {"sessions": sessions, "rounds": rounds, "load_average": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with app_process() as app:
            bench = Bench(app, Path(tmp), sessions)
            await bench.processes.start()
            await bench.raw_processes.start()
            jailed, raw = bench.processes.live()[0], bench.raw_processes.live()[0]
            assert jailed.pid is not None
            assert raw.pid is not None
            gw = await bench.gateway("navigate")
            pool = gw.services.get(BrowserPool)
            try:
                for path in paths:
                    url = app + path
                    for label, process, guarded in (
                        ("raw Playwright, no guard", raw, False),
                        ("raw Playwright + guard on loopback", raw, True),
                        ("jailed Chromium + guard", jailed, True),
                    ):
                        proxies: list[ContextGuard] = []
                        contexts: list[Any] = []
                        pages: list[Any] = []
                        for _ in range(sessions):
                            options: dict[str, Any] = {}
                            if guarded:
                                proxy = await open_guard(
                                    process.jail, process.pid, lambda _blocked: None
                                )
                                proxy.allow(frozenset({app}))
                                await proxy.synced()
                                proxies.append(proxy)
                                options["proxy"] = {"server": proxy.url}
                            context = await process.browser.new_context(**options)
                            contexts.append(context)
                            pages.append(await context.new_page())

                        async def goto(i: int, pages: list[Any] = pages, url: str = url) -> None:
                            await pages[i].goto(url)

                        async def guard_opened(proxies: list[ContextGuard] = proxies) -> int:
                            return sum([(await p.counts()).opened for p in proxies])

                        rows.append(
                            await measure(
                                f"{path}: {label}",
                                goto,
                                sessions,
                                rounds,
                                process.pid or 0,
                                guard_opened,
                                guard_pid(process),
                            )
                        )
                        for context in contexts:
                            await context.close()
                        for proxy in proxies:
                            await proxy.close()
                    tasks = [await bench.new_task(gw) for _ in range(sessions)]
                    identities = [
                        await gw.tasks.authenticate(token, Purpose.AGENT) for _, token in tasks
                    ]
                    bench.shed = 0
                    failures: list[str] = []

                    async def navigate(
                        i: int,
                        identities: list[Any] = identities,
                        path: str = path,
                        failures: list[str] = failures,
                    ) -> None:
                        # A retryable failure other than `overloaded` (a renderer that
                        # crashed as it started, on a machine short of processes) is made
                        # again too, as a client would, and counted.
                        for _ in range(3):
                            result = await bench.call(
                                gw, identities[i], "browser.navigate", {"url": path}
                            )
                            if result.ok or result.error is None or not result.error.retryable:
                                break
                            failures.append(result.error.code)
                        if not result.ok:
                            raise RuntimeError(f"navigate failed: {result.error}")

                    async def opened(tasks: list[tuple[str, str]] = tasks) -> int:
                        return sum(
                            [
                                (await session.proxy.counts()).opened
                                for task_id, _ in tasks
                                if (session := pool.session(task_id)) is not None
                            ]
                        )

                    row = await measure(
                        f"{path}: gateway browser.navigate",
                        navigate,
                        sessions,
                        rounds,
                        jailed.pid,
                        opened,
                        guard_pid(jailed),
                    )
                    row["shed_and_retried"] = bench.shed
                    row["failed_and_retried"] = len(failures)
                    rows.append(row)
                    for task_id, _ in tasks:
                        await gw.tasks.end(task_id)
                    notes["load_average"].append(os.getloadavg()[0])
            finally:
                await bench.close()
    write("navigate", rows, notes)
    return 0


async def first_loads(tries: int, path: str) -> int:
    """`tries` first navigations of fresh tasks, one at a time, against raw Playwright's
    first load of a fresh context on its own Chromium, alternating. Goal: no first
    navigation through the gateway slower than 3x raw Playwright's p99."""
    from gateway.browser import BrowserPool
    from gateway.core.tokens import Purpose

    raw_times: list[float] = []
    gw_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with app_process() as app:
            bench = Bench(app, Path(tmp), 4)
            await bench.raw_processes.start()
            await bench.processes.start()
            # As deployed for fast starts: a warm stock of never-used contexts, refilled
            # between tasks (each try waits for it, as a task arriving at a gateway at
            # rest would find it).
            gw = await bench.gateway("first-loads", browser_warm_contexts=2)
            pool = gw.services.get(BrowserPool)
            try:
                for _ in range(tries):
                    await pool.stocked()
                    context = await bench.raw_browser.new_context()
                    page = await context.new_page()
                    t0 = time.perf_counter()
                    await page.goto(app + path)
                    raw_times.append(time.perf_counter() - t0)
                    await context.close()
                    task_id, token = await bench.new_task(gw)
                    identity = await gw.tasks.authenticate(token, Purpose.AGENT)
                    t0 = time.perf_counter()
                    result = await bench.call(gw, identity, "browser.navigate", {"url": path})
                    gw_times.append(time.perf_counter() - t0)
                    if not result.ok:
                        raise RuntimeError(f"navigate failed: {result.error}")
                    await gw.tasks.end(task_id)
            finally:
                await bench.close()
    raw, ours = summary(raw_times), summary(gw_times)
    worst = max(gw_times)
    rows = [
        {
            "measure": f"first load of {path}, raw Playwright (fresh context)",
            "p50_ms": raw["p50"] * MS,
            "p99_ms": raw["p99"] * MS,
            "max_ms": max(raw_times) * MS,
        },
        {
            "measure": f"first load of {path}, gateway (fresh task, browser.navigate)",
            "p50_ms": ours["p50"] * MS,
            "p99_ms": ours["p99"] * MS,
            "max_ms": worst * MS,
            "max_vs_raw_p99": worst / raw["p99"],
            "goal": 3.0,
            "met": worst / raw["p99"] <= 3.0,
        },
    ]
    write("first-loads", rows, {"tries": tries, "load_average": os.getloadavg()[0]})
    return 0 if rows[1]["met"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--paths", default="/,/heavy")
    parser.add_argument(
        "--first-loads", type=int, default=0, help="instead: this many first loads of /heavy"
    )
    args = parser.parse_args()
    if args.first_loads:
        return asyncio.run(first_loads(args.first_loads, "/heavy"))
    return asyncio.run(run(args.sessions, args.rounds, args.paths.split(",")))


if __name__ == "__main__":
    sys.exit(main())
