"""Running the tasks on both sides, and what the run measured.

Per side: the app's project is built afresh (its own database), served on loopback by its
own process from the suite's virtualenv, and the tasks run in order in one session:

- the gateway: served in-process on loopback (`live_gateway`), one task with the `browser`
  scope whose sandbox app origin is the app's, its MCP door through the official Python SDK
  client with the agent token;
- the peer: `@playwright/mcp` (pinned in bench/peer), over stdio, headless and isolated, on
  the same Chromium binary.

Per task and side: completed (the check on the database passed), the calls made and the
characters of the text the client hands the model, and the error of the step that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.peer import PEER_CLI, ensure_peer
from bench.realapps import library_site, venv
from bench.realapps.agent import (
    Agent,
    Dialect,
    GatewayDialect,
    PeerDialect,
    StepFailed,
    result_text,
)
from bench.realapps.django_tasks import COVER, COVER_TEXT, TASKS, Db, Task
from gateway.chromium import find_chromium
from gateway.serving import free_port
from gateway.testing import live_gateway, test_settings
from mcp import Client

TASK_TIMEOUT_S = 120.0
GOAL_RATIO = 0.6


@dataclass
class Outcome:
    completed: bool
    calls: list[str]
    sizes: list[int]
    characters: int
    error: str | None
    seconds: float


@contextlib.asynccontextmanager
async def served_app(folder: Path, python: Path) -> AsyncIterator[str]:
    """The app served on a free loopback port until the block ends."""
    port = free_port()
    log = (folder / "server.log").open("wb")
    command = library_site.serve_command(python, port)
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=folder,
        env=library_site.serve_env(folder),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    origin = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(origin + "/admin/login/")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"the app did not start: see {folder / 'server.log'}")
        yield origin
    finally:
        proc.terminate()
        await proc.wait()
        log.close()


def prepare(folder: Path, python: Path) -> Db:
    database = library_site.build(folder, python)
    with sqlite3.connect(database) as conn:
        (initial,) = conn.execute(
            "select password from auth_user where username = ?", (library_site.ADMIN_USER,)
        ).fetchone()
    (folder / "initial-admin-password").write_text(initial)
    return Db(database)


async def run_tasks(
    agent: Agent, db: Db, folder: Path, tasks: Sequence[Task]
) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for task in tasks:
        calls_before, chars_before = len(agent.meter.calls), agent.meter.characters
        agent.forget()  # every task starts on a page of its own: nothing carried over
        started = time.perf_counter()
        error: str | None = None
        answer: Any = None
        try:
            answer = await asyncio.wait_for(task.run(agent), TASK_TIMEOUT_S)
        except StepFailed as failed:
            error = str(failed)
        except TimeoutError:
            error = f"no answer within {TASK_TIMEOUT_S:.0f} s"
        if error is None:
            error = task.check(db, answer, folder / "media")
            if error is not None:
                error = f"effect not found: {error}"
        outcomes[task.name] = Outcome(
            completed=error is None,
            calls=agent.meter.calls[calls_before:],
            sizes=agent.meter.sizes[calls_before:],
            characters=agent.meter.characters - chars_before,
            error=error,
            seconds=round(time.perf_counter() - started, 2),
        )
        mark = "ok" if error is None else f"FAILED: {error[:160]}"
        print(f"  {agent.dialect.name:>7} {task.name:<32} {mark}", flush=True)
    return outcomes


async def gateway_side(work: Path, python: Path, tasks: Sequence[Task]) -> dict[str, Outcome]:
    folder = work / "gateway-app"
    db = prepare(folder, python)
    workspace = work / "gateway-workspace"
    workspace.mkdir()
    (workspace / COVER).write_text(COVER_TEXT)
    settings = test_settings(work / "gateway", browser_launch_at_start=True)
    async with (
        served_app(folder, python) as origin,
        live_gateway(settings, check_leaks=False) as live,
    ):
        task = await live.create_task(scopes=["browser", "workspace:write"], app_origin=origin)
        headers = {"authorization": f"Bearer {task['tokens']['agent']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(TASK_TIMEOUT_S)) as http,
            Client(streamable_http_client(f"{live.base_url}/v1/mcp", http_client=http)) as c,
        ):

            async def call(tool: str, args: dict[str, Any]) -> tuple[bool, str]:
                return result_text(await c.call_tool(tool, args))

            # The file to upload is put in the task's workspace before the agent starts, as
            # the peer's is put in its root: not a step of the task, not counted.
            ok, text = await call("workspace_write", {"path": COVER, "contents": COVER_TEXT})
            if not ok:
                raise RuntimeError(f"the task's workspace refused the file: {text}")
            dialect: Dialect = GatewayDialect(workspace)
            return await run_tasks(Agent(call, dialect), db, folder, tasks)


async def peer_side(work: Path, python: Path, tasks: Sequence[Task]) -> dict[str, Outcome]:
    folder = work / "peer-app"
    db = prepare(folder, python)
    workspace = work / "peer-workspace"  # its root: uploads come from here, files land here
    workspace.mkdir()
    (workspace / COVER).write_text(COVER_TEXT)
    async with served_app(folder, python) as origin:
        args = [str(PEER_CLI), "--headless", "--isolated", "--executable-path", find_chromium()]
        if os.geteuid() == 0:
            args.append("--no-sandbox")
        args += ["--output-dir", str(workspace)]
        params = StdioServerParameters(command="node", args=args, cwd=workspace)
        async with Client(params, read_timeout_seconds=TASK_TIMEOUT_S) as p:

            async def call(tool: str, args: dict[str, Any]) -> tuple[bool, str]:
                return result_text(await p.call_tool(tool, args))

            dialect: Dialect = PeerDialect(origin, workspace)
            return await run_tasks(Agent(call, dialect), db, folder, tasks)


def rows_of(
    tasks: Sequence[Task], gateway: dict[str, Outcome], peer: dict[str, Outcome]
) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        g, p = gateway[task.name], peer[task.name]
        both = g.completed and p.completed
        rows.append(
            {
                "app": "django admin",
                "task": task.name,
                "ask": task.ask,
                "gateway completed": g.completed,
                "gateway calls": len(g.calls),
                "gateway characters": g.characters,
                "gateway error": g.error,
                "gateway tools": [f"{t} {n}" for t, n in zip(g.calls, g.sizes, strict=True)],
                "peer completed": p.completed,
                "peer calls": len(p.calls),
                "peer characters": p.characters,
                "peer error": p.error,
                "peer tools": [f"{t} {n}" for t, n in zip(p.calls, p.sizes, strict=True)],
                "characters ratio": round(g.characters / p.characters, 3) if both else None,
            }
        )
    return rows


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    both = [r for r in rows if r["gateway completed"] and r["peer completed"]]
    lost = [r["task"] for r in rows if r["peer completed"] and not r["gateway completed"]]
    ratios = [r["characters ratio"] for r in both]
    median = statistics.median(ratios) if ratios else None
    more_calls = [r["task"] for r in both if r["gateway calls"] > r["peer calls"]]
    return {
        "tasks": len(rows),
        "gateway completed": sum(r["gateway completed"] for r in rows),
        "peer completed": sum(r["peer completed"] for r in rows),
        "completed by the peer, not by the gateway": lost,
        "median characters ratio (tasks both completed)": median,
        "gateway calls, tasks both completed": sum(r["gateway calls"] for r in both),
        "peer calls, tasks both completed": sum(r["peer calls"] for r in both),
        "tasks where the gateway made more calls": more_calls,
        "goal": (
            f"the gateway completes every task the peer completes; median characters ratio "
            f"<= {GOAL_RATIO}; calls per task no more than the peer's"
        ),
        "met": not lost and median is not None and median <= GOAL_RATIO and not more_calls,
    }


async def measure(names: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], Any]:
    tasks = [t for t in TASKS if not names or t.name in names or t.name == "sign in"]
    version = ensure_peer()
    python = venv.ensure()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gateway = await gateway_side(work, python, tasks)
        peer = await peer_side(work, python, tasks)
    rows = rows_of(tasks, gateway, peer)
    notes = {
        **verdict(rows),
        "peer": f"@playwright/mcp {version}, stdio, --headless --isolated",
        "gateway": "in-process on loopback, MCP door, official SDK client, agent token",
        "apps": {"django admin": f"Django {_django_version(python)}, SQLite, runserver"},
        "chromium": find_chromium(),
        "counted": "characters of the text blocks of every tool result, calls per task",
    }
    return rows, notes


def _django_version(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import django; print(django.get_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
