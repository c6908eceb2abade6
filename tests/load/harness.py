"""The load harness: the callers of the doors, one worker per door per task, and what the
test reads back from the gateway (statuses and timings from its evidence, its memory).

Each task gets a real dashboard page (the shim loaded from `/webmcp.js`, WebMCP on), an
official MCP SDK client with the task's agent token, and a bridge client with its bridge
token. The three doors run concurrently; each call is bounded by `CALL_BOUND_S`, and one that
does not end within it is counted as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import json
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from gateway.bridge import BridgeClient, load_bridge, sandbox_env_values
from gateway.core.registry import exposed_name
from gateway.core.results import ErrorCode, ToolStatus
from mcp import Client
from tests.conftest import task_body

# A call that has not ended after this long is lost (every tool's own deadline is shorter).
CALL_BOUND_S = 90.0
CONTRACT = {status.value for status in ToolStatus}
CODES = {code.value for code in ErrorCode}


def rss_bytes() -> int:
    """This process's resident set (the gateway runs in it), from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def settled_rss() -> int:
    """RSS once garbage is collected and glibc has handed free heap pages back, so what
    remains is what is still held, not what the allocator keeps around for reuse."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_bytes()


def ref_of(snapshot: str, label: str) -> str | None:
    for line in snapshot.splitlines():
        if label in line and "[ref=" in line:
            return line.split("[ref=", 1)[1].split("]", 1)[0]
    return None


@dataclass(frozen=True)
class Outcome:
    door: str
    tool: str
    status: str  # a contract status, or "lost" when the bound ran out
    code: str | None
    seconds: float


@dataclass
class Ledger:
    """Every call the workers made, as its caller saw it end."""

    outcomes: list[Outcome] = field(default_factory=list)

    async def timed(
        self, door: str, tool: str, call: Callable[[], Awaitable[tuple[str, str | None]]]
    ) -> tuple[str, str | None]:
        start = time.perf_counter()
        try:
            status, code = await asyncio.wait_for(call(), CALL_BOUND_S)
        except TimeoutError:
            status, code = "lost", None
        self.outcomes.append(Outcome(door, tool, status, code, time.perf_counter() - start))
        return status, code

    def figures(self) -> dict[str, Any]:
        by_door: dict[str, list[float]] = {}
        for outcome in self.outcomes:
            by_door.setdefault(outcome.door, []).append(outcome.seconds * 1000)
        return {
            "calls": len(self.outcomes),
            "lost": sum(1 for o in self.outcomes if o.status == "lost"),
            "statuses": dict(Counter(o.status for o in self.outcomes)),
            "codes": dict(Counter(o.code for o in self.outcomes if o.code)),
            # Which tools end how, when not in success: where a tail comes from.
            "not_succeeded": {
                f"{o.door} {o.tool} {o.status}/{o.code}": n
                for o, n in sorted(
                    Counter(
                        Outcome(o.door, o.tool, o.status, o.code, 0.0)
                        for o in self.outcomes
                        if o.status != "succeeded"
                    ).items(),
                    key=lambda pair: -pair[1],
                )
            },
            "doors": {
                door: {
                    "calls": len(ms),
                    "p50_ms": round(percentile(ms, 50), 2),
                    "p99_ms": round(percentile(ms, 99), 2),
                    "admitted_p99_ms": round(percentile(self.admitted(door), 99), 2),
                }
                for door, ms in sorted(by_door.items())
            },
        }

    def admitted(self, door: str) -> list[float]:
        """The milliseconds of the door's calls that were not turned away at once."""
        return [
            o.seconds * 1000 for o in self.outcomes if o.door == door and o.code != "overloaded"
        ] or [0.0]

    def against(self, idle: Ledger) -> dict[str, float]:
        """Each door's admitted p99 as a multiple of its p99 in `idle` (the same calls, one
        task alone)."""
        return {
            door: round(
                percentile(self.admitted(door), 99) / percentile(idle.admitted(door), 99), 2
            )
            for door in sorted({o.door for o in idle.outcomes})
        }


def percentile(values: list[float], pct: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


@dataclass
class LoadTask:
    body: dict[str, Any]
    page: Page | None = None

    @property
    def task_id(self) -> str:
        task_id: str = self.body["task_id"]
        return task_id


@dataclass
class Doors:
    base_url: str
    ledger: Ledger
    opening: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))

    # -- the dashboard tab -------------------------------------------------------------

    async def open_tab(self, context: BrowserContext, dashboard: str, task: LoadTask) -> None:
        async with self.opening:  # a few page loads at a time: Chromium shares 2 cores
            page = await context.new_page()
            await page.goto(dashboard + "/", timeout=CALL_BOUND_S * 1000)
            await page.wait_for_function(
                "typeof window.start === 'function'", timeout=CALL_BOUND_S * 1000
            )
            await page.evaluate(
                "(o) => window.start(o)",
                {"gateway": self.base_url, "token": task.body["tokens"]["tab"]},
            )
        task.page = page

    # -- the three doors ---------------------------------------------------------------

    async def mcp_worker(self, task: LoadTask, calls: int) -> None:
        """Official SDK client, agent token: browser.* (navigate, snapshot, click on the
        app), ui.* answered by the page, workspace.* reads."""
        headers = {"authorization": f"Bearer {task.body['tokens']['agent']}"}
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CALL_BOUND_S))
            )
            client = await stack.enter_async_context(
                Client(streamable_http_client(f"{self.base_url}/v1/mcp", http_client=http))
            )
            # As an agent does: the tools listed once, then called by their listed names (a
            # name the client has not seen listed makes it list them again on every call).
            await client.list_tools()
            snapshot = ""

            async def call(tool: str, args: dict[str, Any]) -> tuple[str, str | None]:
                nonlocal snapshot
                result = await client.call_tool(exposed_name(tool), args)
                content: dict[str, Any] = result.structured_content or {}
                if tool == "browser.snapshot" and content.get("status") == "succeeded":
                    snapshot = content["output"]["snapshot"]
                error = content.get("error") or {}
                return str(content.get("status")), error.get("code")

            plan: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
                ("browser.navigate", lambda _i: {"url": "/"}),
                ("browser.snapshot", lambda _i: {}),
                ("browser.click", lambda _i: {"ref": ref_of(snapshot, "Save") or "e0"}),
                ("ui.show_run_progress", lambda i: {"run_id": f"run_{i}"}),
                ("workspace.search", lambda _i: {"query": "load"}),
            ]
            for i in range(calls):
                tool, args = plan[i % len(plan)]
                await self.ledger.timed("mcp", tool, functools.partial(call, tool, args(i)))

    async def page_worker(self, task: LoadTask, calls: int) -> None:
        """From the dashboard page: Chromium's native WebMCP (`page.webmcp.call_tool`, door
        webmcp) for ui.* actions, and the page's own `session.call` (door tab)."""
        page = task.page
        assert page is not None

        async def native(tool: str, args: dict[str, Any]) -> tuple[str, str | None]:
            try:
                await page.webmcp.call_tool(tool, args)
            except PlaywrightError:
                # Chromium hides the message from the agent; the page's log has it.
                [*_, error] = await page.evaluate(
                    "window.events.filter((e) => e.type === 'toolerror')"
                )
                status, code = str(error["message"]).split(" ", 2)[:2]
                return status, code
            return "succeeded", None

        async def session_call(tool: str, args: dict[str, Any]) -> tuple[str, str | None]:
            result: dict[str, Any] = await page.evaluate(
                "([t, a]) => window.session.call(t, a)", [tool, args]
            )
            return str(result.get("status")), (result.get("error") or {}).get("code")

        plan: list[tuple[str, str, Callable[[int], dict[str, Any]]]] = [
            ("webmcp", "ui_show_run_progress", lambda i: {"run_id": f"tab_{i}"}),
            ("webmcp", "ui_read_view", lambda _i: {}),
            (
                "tab",
                "ui.display_proposed_change",
                lambda i: {"title": f"Change {i}", "summary": "load", "diff": "- a\n+ b"},
            ),
            ("tab", "workspace.read", lambda _i: {"path": "notes/seed.md"}),
        ]
        for i in range(calls):
            door, tool, args = plan[i % len(plan)]
            run = native if door == "webmcp" else session_call
            await self.ledger.timed(door, tool, functools.partial(run, tool, args(i)))

    async def bridge_worker(self, task: LoadTask, calls: int) -> None:
        """The parent tool bridge, bridge token: workspace writes, edits, reads, searches."""
        client = bridge_client(self.base_url, task)

        async def call(tool: str, args: dict[str, Any]) -> tuple[str, str | None]:
            result = await client.call(tool, args)
            return result.status, result.error.code if result.error is not None else None

        plan: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
            (
                "workspace.write",
                lambda i: {"path": f"notes/{i}.md", "contents": f"load {i}\n", "create_dirs": True},
            ),
            (
                "workspace.edit",
                lambda i: {
                    "path": f"notes/{i - 1}.md",
                    "old": f"load {i - 1}",
                    "new": f"edited {i - 1}",
                },
            ),
            ("workspace.read", lambda i: {"path": f"notes/{i - 2}.md"}),
            ("workspace.search", lambda _i: {"query": "edited"}),
        ]
        for i in range(calls):
            tool, args = plan[i % len(plan)]
            await self.ledger.timed("bridge", tool, functools.partial(call, tool, args(i)))


def bridge_client(base_url: str, task: LoadTask) -> BridgeClient:
    """The sandbox's client, its endpoint variable pointed at this gateway's port."""
    envelope = load_bridge(task.body["parent_tool_bridge"])
    env = sandbox_env_values(envelope, task.body["tokens"]["bridge"])
    assert envelope.dispatcher.endpoint is not None
    env[envelope.dispatcher.endpoint.url_env] = f"{base_url}/v1/parent-tools"
    return BridgeClient.from_envelope(envelope, env=env)


async def seed_workspace(base_url: str, task: LoadTask) -> None:
    """A file the page's reads find (the first bridge call, outside the ledger)."""
    client = bridge_client(base_url, task)
    result = await client.call(
        "workspace.write", {"path": "notes/seed.md", "contents": "load seed\n", "create_dirs": True}
    )
    assert result.status == "succeeded", result


async def call_statuses(
    http: httpx.AsyncClient,
    control: dict[str, str],
    task_id: str,
    timeouts: Counter[str] | None = None,
    waits: dict[str, list[float]] | None = None,
    inside: dict[str, list[float]] | None = None,
) -> Counter[str]:
    """The statuses of the task's evidence records of kind `call`, page by page (counted,
    not kept: the records themselves would weigh on the memory this test measures).
    `timeouts` counts the timed-out calls' tools and the start of their messages; `waits`
    gets, by door, how long each admitted call waited in the gateway's own queues (its
    evidence's `admission.waited_ms`, 0 for one that did not wait); `inside`, by door, how
    long each admitted call took from the gateway's pipeline taking it to its record (its
    `duration_ms`: the caller's time less the door's transport and the client)."""
    found: Counter[str] = Counter()
    after = 0
    while True:
        response = await http.get(
            f"/v1/tasks/{task_id}/evidence", params={"after": after, "limit": 200}, headers=control
        )
        assert response.status_code == 200, response.text
        records: list[dict[str, Any]] = response.json()["records"]
        if not records:
            return found
        calls = [r for r in records if r.get("kind") == "call"]
        found.update(str(r["status"]) for r in calls)
        if timeouts is not None:
            timeouts.update(
                f"{r.get('tool')}: {str((r.get('error') or {}).get('message'))[:90]}"
                f" {json.dumps(r.get('context'), sort_keys=True)[:160]}"
                for r in calls
                if r["status"] == "timeout"
            )
        for r in calls:
            if (r.get("error") or {}).get("code") == "overloaded":
                continue
            door = str(r.get("door"))
            if waits is not None:
                admission = (r.get("context") or {}).get("admission") or {}
                waits.setdefault(door, []).append(float(admission.get("waited_ms", 0.0)))
            if inside is not None:
                inside.setdefault(door, []).append(float(r.get("duration_ms") or 0.0))
        after = max(int(r["seq"]) for r in records)


def task_spec(app_origin: str, dashboard: str) -> dict[str, Any]:
    return task_body(
        scopes=["ui", "browser", "workspace:read", "workspace:write"],
        app_origin=app_origin,
        budget={"max_calls": 10_000, "max_side_effects": 10_000},
    )


def dump(path: Any, figures: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n")


class LoopLag:
    """How late this process's event loop wakes a task that asked to sleep `every_s`: the
    time a ready coroutine (a gateway handler, a client's reply) waits for the loop."""

    def __init__(self, every_s: float = 0.05) -> None:
        self.every_s = every_s
        self.late_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.every_s)
            self.late_ms.append((time.perf_counter() - start - self.every_s) * 1000)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, float]:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return spread(self.late_ms or [0.0])


def spread(ms: list[float]) -> dict[str, float]:
    """p50, p99 and max of a list of milliseconds, rounded for a report."""
    return {
        "p50": round(percentile(ms, 50), 1),
        "p99": round(percentile(ms, 99), 1),
        "max": round(max(ms), 1),
    }
