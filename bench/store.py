"""The pipeline's overhead on PostgreSQL against SQLite, in the same run.

A no-op tool through the pipeline with its evidence durably committed, one call at a time
and 64 in flight, on SQLite in a data dir and on a throwaway PostgreSQL cluster on loopback
(fsync on, as in production). Goal: PostgreSQL within 1.5x of SQLite at 64 in flight, where
the writer's group commit carries the load. Run: `python -m bench.store [--rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.report import summary, write
from gateway.identity import Actor, Sandbox
from gateway.registry import Tool, ToolContext
from gateway.results import Door
from gateway.runtime import Gateway
from gateway.tasks import TaskCreate
from gateway.testing import test_settings
from gateway.testing.postgres import throwaway_cluster

GOAL = 1.5
US = 1e6
CONCURRENCY = 64


class Empty(BaseModel):
    pass


async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
    return {"ok": True}


async def measure(database_url: str | None, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway(test_settings(Path(tmp), database_url=database_url))
        gw.registry.add(Tool("bench.noop", "No-op", "Does nothing", Empty, noop))
        await gw.start()
        try:
            identity, _ = await gw.tasks.create(
                TaskCreate(
                    actor=Actor(id="bench", role="admin"),
                    org_id="org_bench",
                    sandbox=Sandbox(id="sb", app_origin="http://127.0.0.1:9"),
                    scopes=[],
                )
            )
            for _ in range(100):  # warm-up: connections, compiled statements
                await gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
            one: list[float] = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
                one.append(time.perf_counter() - t0)
            many: list[float] = []
            for _ in range(max(1, rounds // CONCURRENCY) * 4):
                t0 = time.perf_counter()
                await asyncio.gather(
                    *(
                        gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
                        for _ in range(CONCURRENCY)
                    )
                )
                many.append((time.perf_counter() - t0) / CONCURRENCY)
            return {"one": one, "many": many}
        finally:
            await gw.stop()


def run(rounds: int) -> int:
    sqlite = asyncio.run(measure(None, rounds))
    with throwaway_cluster(durable=True) as cluster:
        postgres = asyncio.run(measure(cluster.new_database("bench"), rounds))
    rows: list[dict[str, Any]] = []
    ratios = {}
    for mode, label in (
        ("one", "one call at a time"),
        ("many", f"{CONCURRENCY} in flight (time per call)"),
    ):
        s, p = summary(sqlite[mode]), summary(postgres[mode])
        ratios[mode] = p["p50"] / s["p50"]
        rows.append(
            {
                "measure": f"SQLite, {label}",
                "n": s["n"],
                "p50 µs": s["p50"] * US,
                "p99 µs": s["p99"] * US,
            }
        )
        rows.append(
            {
                "measure": f"PostgreSQL, {label}",
                "n": p["n"],
                "p50 µs": p["p50"] * US,
                "p99 µs": p["p99"] * US,
                "ratio p50": ratios[mode],
            }
        )
    met = ratios["many"] <= GOAL
    write("store", rows, {"goal": {"postgres_over_sqlite_p50_at_64": GOAL}, "met": met})
    print(
        f"PostgreSQL/SQLite p50: {ratios['one']:.2f}x one at a time, {ratios['many']:.2f}x at "
        f"{CONCURRENCY} in flight (goal {GOAL}x): {'met' if met else 'NOT met'}"
    )
    return 0 if met else 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    return run(parser.parse_args().rounds)


if __name__ == "__main__":
    sys.exit(main())
