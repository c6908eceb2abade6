"""The pipeline's overhead on PostgreSQL against SQLite, in the same run.

A no-op tool through the pipeline with its evidence durably committed, one call at a time
and 64 in flight, on SQLite in a data dir and on a throwaway PostgreSQL cluster on loopback
(fsync on, as in production), with each commit mode (`GATEWAY_DB_SYNCHRONOUS`: `NORMAL`,
the default, and `FULL`). Goal: PostgreSQL within 1.5x of SQLite at 64 in flight, where
the writer's group commit carries the load, in both modes.
Run: `python -m bench.store [--rounds N] [--modes NORMAL,FULL]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.report import summary, write
from gateway.core.identity import Actor, Sandbox, TaskIdentity
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.tasks.service import TaskCreate
from gateway.runtime import Gateway
from gateway.testing import test_settings
from tests.servers.postgres import throwaway_cluster

GOAL = 1.5
US = 1e6
CONCURRENCY = 64
MODES = ("NORMAL", "FULL")
# Calls one store makes one at a time before the other takes its turn.
STRETCH = 50


class Empty(BaseModel):
    pass


async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
    return {"ok": True}


@contextlib.asynccontextmanager
async def started(database_url: str | None, synchronous: str) -> AsyncIterator[_Side]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = test_settings(Path(tmp), database_url=database_url, db_synchronous=synchronous)
        gw = Gateway(settings)
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
            side = _Side(gw, identity)
            for _ in range(100):  # warm-up: connections, compiled statements
                await side.call()
            yield side
        finally:
            await gw.stop()


@dataclass
class _Side:
    gw: Gateway
    identity: TaskIdentity
    one: list[float] = field(default_factory=list)
    many: list[float] = field(default_factory=list)
    records: int = 0
    batches: int = 0

    async def call(self) -> None:
        await self.gw.pipeline.call(self.identity, "bench.noop", {}, door=Door.INTERNAL)

    async def one_at_a_time(self, calls: int) -> None:
        for _ in range(calls):
            t0 = time.perf_counter()
            await self.call()
            self.one.append(time.perf_counter() - t0)

    async def in_flight(self) -> None:
        batches = self.gw.store.batches
        t0 = time.perf_counter()
        await asyncio.gather(*(self.call() for _ in range(CONCURRENCY)))
        self.many.append((time.perf_counter() - t0) / CONCURRENCY)
        self.records += CONCURRENCY
        self.batches += self.gw.store.batches - batches


async def measure(postgres_url: str, synchronous: str, rounds: int) -> dict[str, _Side]:
    """Both stores side by side in one process, taking turns in short stretches, so a
    change of load on a shared machine touches both alike."""
    async with started(None, synchronous) as sqlite, started(postgres_url, synchronous) as pg:
        sides = (sqlite, pg)
        for stretch in range(0, rounds, STRETCH):
            for side in sides if stretch % (2 * STRETCH) == 0 else sides[::-1]:
                await side.one_at_a_time(min(STRETCH, rounds - stretch))
        for turn in range(max(1, rounds // CONCURRENCY) * 4):
            for side in sides if turn % 2 == 0 else sides[::-1]:
                await side.in_flight()
        return {"sqlite": sqlite, "postgresql": pg}


def run(rounds: int, modes: list[str]) -> int:
    results: dict[str, dict[str, _Side]] = {}
    with throwaway_cluster(durable=True) as cluster:
        for mode in modes:
            url = cluster.new_database(f"bench_{mode.lower()}")
            results[mode] = asyncio.run(measure(url, mode, rounds))
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    for mode in modes:
        for shape, label in (
            ("one", "one call at a time"),
            ("many", f"{CONCURRENCY} in flight (time per call)"),
        ):
            sqlite, postgres = results[mode]["sqlite"], results[mode]["postgresql"]
            s, p = summary(getattr(sqlite, shape)), summary(getattr(postgres, shape))
            ratio = p["p50"] / s["p50"]
            if shape == "many":
                ratios[mode] = ratio
            for name, figures, result in (("SQLite", s, sqlite), ("PostgreSQL", p, postgres)):
                row: dict[str, Any] = {
                    "measure": f"{name}, {mode}, {label}",
                    "n": figures["n"],
                    "p50 µs": figures["p50"] * US,
                    "p99 µs": figures["p99"] * US,
                }
                if shape == "many":
                    row["records per commit"] = round(result.records / max(1, result.batches), 1)
                if name == "PostgreSQL":
                    row["ratio p50"] = ratio
                rows.append(row)
    met = all(r <= GOAL for r in ratios.values())
    write(
        "store",
        rows,
        {"goal": {"postgres_over_sqlite_p50_at_64": GOAL}, "ratios_at_64": ratios, "met": met},
    )
    for mode, ratio in ratios.items():
        print(f"PostgreSQL/SQLite p50 at {CONCURRENCY} in flight, {mode}: {ratio:.2f}x")
    print(f"goal {GOAL}x: {'met' if met else 'NOT met'}")
    return 0 if met else 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--modes", default=",".join(MODES), help="commit modes, comma-separated")
    args = parser.parse_args()
    return run(args.rounds, [m.strip().upper() for m in args.modes.split(",") if m.strip()])


if __name__ == "__main__":
    sys.exit(main())
