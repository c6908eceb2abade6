"""The task browser under overload: browser calls offered at about twice what its action
slots serve, against the same calls on an idle gateway, in the same run.

The gateway runs in a process of its own (as `gateway serve` does, one Chromium process),
the sandbox app in another, and this process is its callers: one official MCP SDK client
per task, each task a browser context of its own. The calls are an agent loop's:
`browser_navigate` (with its snapshot), `browser_snapshot`, `browser_click` on the page's
Save button, in turn per task, one call at a time per task.

1. Idle: the calls one at a time, back to back, on each gateway before its load.
2. Capacity: what the slots serve, measured: twice as many callers as slots, each calling
   again as soon as it has its answer, so the slots are never idle and no call is shed.
3. Loaded: calls arriving on a fixed schedule at `--load` (2) times that capacity for
   `--seconds`, each to a task with no call in flight, whatever the earlier calls' fate.

Reported: the idle and the admitted (not shed) calls' p50/p99, how many were shed
(`unavailable`/`overloaded`, also read from `gateway_calls_shed_total`), `lost` (a call
whose client got no result within 90 s, or an error instead of one) and `unanswered` (calls
without exactly one evidence record). Goal: admitted p99 within 3x the idle p99, lost and
unanswered 0.

`--slots 1,2,3,4` runs phases 2 and 3 once per value of `browser_actions_per_process`, to
choose its default (the most calls served per second within the goal). `--unbounded` adds
a loaded run without admission (64 slots: every call runs at once, as before it) at the
offered rate of the first value. Run: `python -m bench.overload`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.browser import SAVE_REF, app_process
from bench.report import cpu_quiet, percentile, write
from gateway.browser.memory import PROC, process_tree
from gateway.testing.settings import CONTROL_KEY

GOAL = 3.0  # admitted p99 over idle p99
CALL_BOUND_S = 90.0  # longer than every tool's deadline: a call still open then is lost
CAPACITY_S = 10.0
MS = 1e3
PLAN = ("browser_navigate", "browser_snapshot", "browser_click")


# -- the gateway, in a process of its own ----------------------------------------------


def serve_gateway(port: int, data: str, slots: int, max_contexts: int, waiting: int) -> None:
    from gateway.app import build_app
    from gateway.browser import admission
    from gateway.serving import serving
    from gateway.testing import test_settings

    if waiting >= 0:
        admission.WAITING_PER_SLOT = waiting  # the queue's bound, measured against others

    settings = test_settings(
        Path(data),
        port=port,
        max_contexts=max_contexts,
        browser_launch_at_start=True,
        browser_actions_per_process=slots,
    )

    async def run() -> None:
        async with serving(build_app(settings), port=port):
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


@contextlib.asynccontextmanager
async def gateway_process(
    data: Path, slots: int, max_contexts: int, waiting: int
) -> AsyncIterator[tuple[str, int]]:
    """The gateway's URL and its pid."""
    from gateway.serving import free_port

    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.overload", "--serve-gateway"),
        *(str(port), str(data), str(slots), str(max_contexts), str(waiting)),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(1200):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url + "/healthz")).status_code == 200:
                        break
                if proc.returncode is not None:
                    raise RuntimeError("the gateway process ended at its start")
                await asyncio.sleep(0.05)
        yield url, proc.pid
    finally:
        # SIGINT: the gateway stops as `gateway serve` does, closing its Chromium.
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


# -- the callers -------------------------------------------------------------------------


@dataclass
class Agent:
    """One task and its MCP client; it makes the plan's calls in turn, one at a time."""

    task_id: str
    client: Any
    step: int = 0
    save_ref: str | None = None
    sent: int = 0

    def next_call(self) -> tuple[str, dict[str, Any]]:
        tool = PLAN[self.step % len(PLAN)]
        self.step += 1
        if tool == "browser_navigate":
            return tool, {"url": "/"}
        if tool == "browser_click" and self.save_ref is not None:
            return tool, {"ref": self.save_ref}
        return "browser_snapshot", {}

    async def call(self) -> tuple[str, str | None, float]:
        """The next call: (status, error code, seconds); status `lost` when no result came."""
        tool, args = self.next_call()
        self.sent += 1
        start = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.client.call_tool(tool, args), CALL_BOUND_S)
        except Exception:
            return "lost", None, time.perf_counter() - start
        seconds = time.perf_counter() - start
        content: dict[str, Any] = result.structured_content or {}
        output = content.get("output") or {}
        if isinstance(output.get("snapshot"), str):
            found = SAVE_REF.search(output["snapshot"])
            self.save_ref = found.group(1) if found else None
        error = content.get("error") or {}
        return str(content.get("status")), error.get("code"), seconds


@dataclass
class Phase:
    seconds: list[float] = field(default_factory=list)  # admitted calls only
    statuses: Counter[str] = field(default_factory=Counter)
    shed: int = 0
    lost: int = 0
    sent: int = 0
    late: int = 0  # arrivals that found no task free (the schedule fell behind)
    span_s: float = 0.0

    def add(self, status: str, code: str | None, seconds: float) -> None:
        self.sent += 1
        self.statuses[f"{status}/{code}" if code else status] += 1
        if status == "lost":
            self.lost += 1
        elif code == "overloaded":
            self.shed += 1
        else:
            self.seconds.append(seconds)

    @property
    def served_per_s(self) -> float | None:
        return self.statuses.get("succeeded", 0) / self.span_s if self.span_s else None


@contextlib.asynccontextmanager
async def agents_of(base_url: str, app: str, tasks: int) -> AsyncIterator[list[Agent]]:
    """`tasks` tasks with their MCP clients, each task's context opened on the app's page
    already (so the phases measure calls, not task starts)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from gateway.testing import task_body
    from mcp import Client

    control = {"authorization": f"Bearer {CONTROL_KEY}"}
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=60) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        agents: list[Agent] = []
        for _ in range(tasks):
            response = await http.post(
                "/v1/tasks",
                json=task_body(scopes=["browser"], app_origin=app, budget={"max_calls": 100_000}),
                headers=control,
            )
            response.raise_for_status()
            body = response.json()
            mcp_http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers={"authorization": f"Bearer {body['tokens']['agent']}"},
                    timeout=httpx2.Timeout(CALL_BOUND_S),
                )
            )
            client = await stack.enter_async_context(
                Client(streamable_http_client(f"{base_url}/v1/mcp", http_client=mcp_http))
            )
            await client.list_tools()  # as an agent does first (and the SDK checks results by it)
            agents.append(Agent(body["task_id"], client))
        opening = asyncio.Semaphore(4)

        async def first(agent: Agent) -> None:
            async with opening:
                status, code, _ = await agent.call()
                while code == "overloaded":  # four at once can be more than the slots
                    await asyncio.sleep(0.2)
                    agent.step -= 1
                    status, code, _ = await agent.call()
                if status != "succeeded":
                    raise RuntimeError(f"a task's first navigate ended {status}/{code}")

        await asyncio.gather(*(first(a) for a in agents))
        yield agents


async def idle(agents: list[Agent], calls: int) -> Phase:
    """The calls one at a time, back to back (one caller: nothing waits, nothing shares
    the cores with it but the previous call's aftermath)."""
    phase = Phase()
    await cpu_quiet(timeout_s=5.0)
    for i in range(calls):
        phase.add(*await agents[i % len(agents)].call())
    return phase


async def capacity(agents: list[Agent], seconds: float) -> Phase:
    """Each agent calls again as soon as it has its answer, for `seconds`."""
    phase = Phase()
    start = time.perf_counter()

    async def loop(agent: Agent) -> None:
        while time.perf_counter() - start < seconds:
            phase.add(*await agent.call())

    await asyncio.gather(*(loop(a) for a in agents))
    phase.span_s = time.perf_counter() - start
    return phase


async def loaded(agents: list[Agent], rate: float, seconds: float) -> Phase:
    """Calls arriving every 1/rate s, each to an agent with nothing in flight."""
    phase = Phase()
    free: asyncio.Queue[Agent] = asyncio.Queue()
    for agent in agents:
        free.put_nowait(agent)
    running: set[asyncio.Task[None]] = set()

    async def one(agent: Agent) -> None:
        try:
            phase.add(*await agent.call())
        finally:
            free.put_nowait(agent)

    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        if free.empty():
            phase.late += 1
        task = asyncio.create_task(one(await free.get()))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    phase.span_s = time.perf_counter() - start
    return phase


@dataclass
class Evidence:
    unanswered: int = 0  # calls without exactly one evidence record
    # Of the admitted calls, as the gateway recorded them: time in the pipeline, and the
    # part of it spent waiting for an action slot.
    gateway_ms: list[float] = field(default_factory=list)
    waited_ms: list[float] = field(default_factory=list)


async def evidence(base_url: str, agents: list[Agent], since: dict[str, int]) -> Evidence:
    """Each task's records of kind `call` against the calls its agent made (all of them),
    and the timings of those recorded after `since` (the phase's own)."""
    control = {"authorization": f"Bearer {CONTROL_KEY}"}
    found = Evidence()
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        for agent in agents:
            seen, after = 0, 0
            while True:
                response = await http.get(
                    f"/v1/tasks/{agent.task_id}/evidence",
                    params={"after": after, "limit": 500},
                    headers=control,
                )
                records = response.json()["records"]
                if not records:
                    break
                calls = [r for r in records if r.get("kind") == "call"]
                seen += len(calls)
                for record in calls:
                    data = record
                    error = data.get("error") or {}
                    if int(record["seq"]) > since.get(agent.task_id, 0) and (
                        error.get("code") != "overloaded"
                    ):
                        found.gateway_ms.append(float(data["duration_ms"]))
                        admission = (data.get("context") or {}).get("admission") or {}
                        found.waited_ms.append(float(admission.get("waited_ms", 0.0)))
                after = max(int(r["seq"]) for r in records)
            found.unanswered += abs(agent.sent - seen)
            since[agent.task_id] = after
    return found


async def shed_metric(base_url: str) -> float:
    async with httpx.AsyncClient(base_url=base_url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith('gateway_calls_shed_total{resource="browser"} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _cpu_s(pid: int) -> float:
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class CpuUse:
    """CPU time from now on: the gateway's Python, its browser (every process under it:
    Playwright's driver, Chromium and its renderers), and the callers (this process)."""

    def __init__(self, gateway_pid: int) -> None:
        self.pid = gateway_pid
        self.start = self._now()

    def _now(self) -> tuple[float, float, float]:
        browser = sum(_cpu_s(p) for p in process_tree(self.pid) if p != self.pid)
        return _cpu_s(self.pid), browser, _cpu_s(os.getpid())

    def cores(self, span_s: float) -> dict[str, float]:
        """Cores each used on the average over `span_s` seconds."""
        now = self._now()
        names = ("cores_gateway", "cores_browser", "cores_callers")
        return {n: (b - a) / span_s for n, a, b in zip(names, self.start, now, strict=True)}


def row(name: str, phase: Phase, **extra: Any) -> dict[str, Any]:
    ms = [s * MS for s in phase.seconds]
    return {
        "run": name,
        "calls": phase.sent,
        "admitted": len(ms),
        "p50_ms": percentile(ms, 50) if ms else None,
        "p99_ms": percentile(ms, 99) if ms else None,
        "shed": phase.shed,
        "lost": phase.lost,
        "served_per_s": phase.served_per_s,
        **extra,
    }


# -- the run -------------------------------------------------------------------------------


async def measure(
    slots: list[int],
    load: float,
    seconds: float,
    idle_calls: int,
    unbounded: bool,
    waiting: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {"goal": {"admitted_p99_over_idle_p99": GOAL}, "load": load}
    # Enough tasks that an arrival always finds one free: at most the slots, the queue
    # (2 per slot) and the shed calls on their way back are in flight at once.
    tasks = max(24, 8 * max(slots))
    first_rate: float | None = None
    runs = [(f"{n} slots", n) for n in slots] + ([("no admission", 64)] if unbounded else [])
    async with app_process() as app:
        with tempfile.TemporaryDirectory() as tmp:
            for name, n in runs:
                data = Path(tmp) / name.replace(" ", "_")
                async with (
                    gateway_process(data, n, tasks + 4, waiting) as (base_url, pid),
                    agents_of(base_url, app, tasks) as agents,
                ):
                    # The idle figure on each gateway, just before its load: the machine
                    # (shared, here) drifts less within one gateway's minute than across.
                    idle_row = row(f"idle, {name}", await idle(agents, idle_calls))
                    rows.append(idle_row)
                    if n == 64:
                        assert first_rate is not None
                        rate = first_rate
                    else:
                        await cpu_quiet(timeout_s=5.0)
                        full = await capacity(agents[: 2 * n], CAPACITY_S)
                        rows.append(row(f"capacity, {name}", full))
                        served = full.served_per_s
                        assert served, "no call was served at all"
                        rate = load * served
                        first_rate = first_rate or rate
                    since: dict[str, int] = {}
                    await evidence(base_url, agents, since)  # the calls before this phase
                    shed_before = await shed_metric(base_url)
                    await cpu_quiet(timeout_s=5.0)
                    cpu = CpuUse(pid)
                    phase = await loaded(agents, rate, seconds)
                    used = cpu.cores(phase.span_s)
                    p99 = percentile([s * MS for s in phase.seconds], 99)
                    seen = await evidence(base_url, agents, since)
                    rows.append(
                        row(
                            f"loaded, {name}",
                            phase,
                            offered_per_s=rate,
                            unanswered=seen.unanswered,
                            shed_metric=await shed_metric(base_url) - shed_before,
                            gateway_p50_ms=percentile(seen.gateway_ms, 50),
                            gateway_p99_ms=percentile(seen.gateway_ms, 99),
                            waited_p50_ms=percentile(seen.waited_ms, 50),
                            waited_p99_ms=percentile(seen.waited_ms, 99),
                            p99_over_idle=p99 / idle_row["p99_ms"],
                            arrivals_late=phase.late,
                            **used,
                            statuses=dict(phase.statuses),
                        )
                    )
    notes["tasks"] = tasks
    return rows, notes


def main() -> int:
    if sys.argv[1:2] == ["--serve-gateway"]:
        port, data, count, contexts, waiting = sys.argv[2:7]
        serve_gateway(int(port), data, int(count), int(contexts), int(waiting))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--slots", default="", help="values of browser_actions_per_process")
    parser.add_argument("--load", type=float, default=2.0, help="offered load / capacity")
    parser.add_argument("--seconds", type=float, default=30.0, help="of each loaded phase")
    parser.add_argument("--idle-calls", type=int, default=100)
    parser.add_argument("--unbounded", action="store_true", help="also run without admission")
    parser.add_argument(
        "--waiting-per-slot", type=int, default=-1, help="calls that may wait per slot"
    )

    args = parser.parse_args()
    from gateway.settings import Settings

    default = Settings.model_fields["browser_actions_per_process"].default
    slots = [int(v) for v in args.slots.split(",") if v] or [default]
    rows, notes = asyncio.run(
        measure(
            slots,
            args.load,
            args.seconds,
            args.idle_calls,
            args.unbounded,
            args.waiting_per_slot,
        )
    )
    # The goal is the default's; other values are there to compare.
    judged = [r for r in rows if r["run"] == f"loaded, {default} slots"] or [
        r for r in rows if r["run"].startswith("loaded") and "no admission" not in r["run"]
    ]
    met = all(
        r["p99_over_idle"] <= GOAL and r["lost"] == 0 and r["unanswered"] == 0 for r in judged
    )
    notes["met"] = met
    notes["statuses"] = {r["run"]: r.pop("statuses") for r in rows if "statuses" in r}
    write("overload", rows, notes)
    for run, statuses in notes["statuses"].items():
        print(f"{run}: {statuses}")
    print(f"admitted p99 within {GOAL}x the idle p99, none lost or unanswered:", end=" ")
    print("met" if met else "NOT met")
    return 0 if met else 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
