"""Token verification and the pipeline's overhead, against the bare operations they wrap.

Goals (p50, this machine): verification under 30 µs; the pipeline's overhead for a no-op
tool, with its evidence durably committed, under 200 µs per call. Run:
`python -m bench.core`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench.report import summary, write
from gateway.core.identity import Actor, Sandbox
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.tasks.service import TaskCreate
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway
from gateway.testing import test_settings

US = 1e6


class Empty(BaseModel):
    pass


async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
    return {"ok": True}


async def measure(rounds: int = 3000, concurrency: int = 64) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = test_settings(Path(tmp))
        gw = Gateway(settings)
        gw.registry.add(Tool("bench.noop", "No-op", "Does nothing", Empty, noop))
        await gw.start()
        try:
            identity, tokens = await gw.tasks.create(
                TaskCreate(
                    actor=Actor(id="bench", role="admin"),
                    org_id="org_bench",
                    sandbox=Sandbox(id="sb", app_origin="http://127.0.0.1:9"),
                    scopes=[],
                )
            )
            rows: list[dict[str, Any]] = []

            # Token verification: the signature alone, then the whole check with the task.
            token = tokens["agent"]
            sig = [_timed(lambda: gw.tokens.verify(token, Purpose.AGENT)) for _ in range(rounds)]
            full = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await gw.tasks.authenticate(token, Purpose.AGENT)
                full.append(time.perf_counter() - t0)
            rows.append(_row("token verify (signature, purpose, age)", sig))
            rows.append(_row("token verify + stored task check", full))

            # The baseline: the handler awaited directly, with its input validated.
            ctx = ToolContext(
                identity=identity,
                call_id="x",
                tool=gw.registry.get("bench.noop"),  # type: ignore[arg-type]
                door=Door.INTERNAL,
                services=gw.services,
            )
            direct = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await noop(ctx, Empty.model_validate({}))
                direct.append(time.perf_counter() - t0)
            rows.append(_row("handler called directly", direct))

            seq = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
                seq.append(time.perf_counter() - t0)
            rows.append(_row("pipeline, one call at a time (evidence committed)", seq, base=direct))

            batches_before = gw.store.batches
            per_call: list[float] = []
            for _ in range(max(1, rounds // concurrency)):
                t0 = time.perf_counter()
                await asyncio.gather(
                    *(
                        gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
                        for _ in range(concurrency)
                    )
                )
                per_call.append((time.perf_counter() - t0) / concurrency)
            commits = gw.store.batches - batches_before
            rows.append(
                _row(f"pipeline, {concurrency} concurrent (time per call)", per_call, base=direct)
            )
            rows[-1]["records per commit"] = round(
                (len(per_call) * concurrency) / max(commits, 1), 1
            )
            return rows
        finally:
            await gw.stop()


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _row(name: str, samples: list[float], base: list[float] | None = None) -> dict[str, Any]:
    s = summary(samples)
    row: dict[str, Any] = {"measure": name, "p50 µs": s["p50"] * US, "p99 µs": s["p99"] * US}
    if base is not None:
        b = summary(base)
        row["overhead p50 µs"] = (s["p50"] - b["p50"]) * US
        row["ratio p50"] = s["p50"] / b["p50"]
    return row


def main() -> None:
    rows = asyncio.run(measure())
    path = write("core", rows, {"goals": {"verify p50 µs": 30, "pipeline overhead p50 µs": 200}})
    print(f"written to {path}")


if __name__ == "__main__":
    main()
