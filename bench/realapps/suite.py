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
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.peer import PEER_CLI, ensure_peer
from bench.realapps import django_tasks, library_site, newsroom_site, newsroom_tasks, venv
from bench.realapps.agent import (
    Agent,
    Dialect,
    GatewayDialect,
    PeerDialect,
    StepFailed,
    result_text,
)
from bench.realapps.tasks import Db, Task
from gateway.browser.chromium import find_chromium
from gateway.serving import free_port
from gateway.testing import live_gateway, test_settings
from mcp import Client

TASK_TIMEOUT_S = 120.0
GOAL_RATIO = 0.6


@dataclass(frozen=True)
class App:
    """One app of the suite: how it is built and served, and what is asked of it."""

    name: str
    package: str  # its distribution, for the version in the notes
    build: Callable[[Path, Path], Path]  # (folder, python) -> its SQLite file
    serve_command: Callable[[Path, int], list[str]]
    env: Callable[[Path], dict[str, str]]
    tasks: Sequence[Task]
    files: dict[str, str]  # what its tasks upload, put where each side takes files from


APPS = (
    App(
        "django admin",
        "django",
        library_site.build,
        library_site.serve_command,
        library_site.env,
        django_tasks.TASKS,
        {django_tasks.COVER: django_tasks.COVER_TEXT},
    ),
    App(
        "wagtail",
        "wagtail",
        newsroom_site.build,
        newsroom_site.serve_command,
        newsroom_site.env,
        newsroom_tasks.TASKS,
        {newsroom_tasks.DOCUMENT: newsroom_tasks.DOCUMENT_TEXT},
    ),
)


@dataclass
class Outcome:
    completed: bool
    calls: list[str]
    sizes: list[int]
    characters: int
    error: str | None
    seconds: float


@contextlib.asynccontextmanager
async def served_app(app: App, folder: Path, python: Path) -> AsyncIterator[str]:
    """The app served on a free loopback port until the block ends."""
    port = free_port()
    log = (folder / "server.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *app.serve_command(python, port),
        cwd=folder,
        env=app.env(folder),
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


def prepare(app: App, folder: Path, python: Path, workspace: Path) -> Db:
    db = Db(app.build(folder, python))
    workspace.mkdir(parents=True)
    for name, text in app.files.items():
        (workspace / name).write_text(text)
    return db


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
            error = task.check(db, answer, folder)
            if error is not None:
                error = f"effect not found: {error}"
        if error is not None:
            await _leave_cleanly(agent)
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


async def _leave_cleanly(agent: Agent) -> None:
    """After a failed task, leave its page, answering the dialog a page with unsaved changes
    asks before it is left, so the next task starts on a page of its own. Not counted: it
    belongs to no task."""
    dialect = agent.dialect
    for tool, args in (dialect.navigate(dialect.url("/admin/")), dialect.dialog(True)):
        with contextlib.suppress(Exception):
            await agent._call(tool, args)


async def gateway_side(
    app: App, work: Path, python: Path, tasks: Sequence[Task]
) -> dict[str, Outcome]:
    folder = work / "gateway-app"
    workspace = work / "gateway-workspace"
    db = prepare(app, folder, python, workspace)
    settings = test_settings(work / "gateway", browser_launch_at_start=True)
    async with (
        served_app(app, folder, python) as origin,
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
            for name, contents in app.files.items():
                ok, text = await call("workspace_write", {"path": name, "contents": contents})
                if not ok:
                    raise RuntimeError(f"the task's workspace refused the file: {text}")
            dialect: Dialect = GatewayDialect(workspace)
            return await run_tasks(Agent(call, dialect), db, folder, tasks)


async def peer_side(
    app: App, work: Path, python: Path, tasks: Sequence[Task]
) -> dict[str, Outcome]:
    folder = work / "peer-app"
    workspace = work / "peer-workspace"  # its root: uploads come from here, files land here
    db = prepare(app, folder, python, workspace)
    async with served_app(app, folder, python) as origin:
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
    app: App, tasks: Sequence[Task], gateway: dict[str, Outcome], peer: dict[str, Outcome]
) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        g, p = gateway[task.name], peer[task.name]
        both = g.completed and p.completed
        rows.append(
            {
                "app": app.name,
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


async def measure(
    app_names: Sequence[str] | None = None, names: Sequence[str] | None = None
) -> tuple[list[dict[str, Any]], Any]:
    version = ensure_peer()
    python = venv.ensure()
    rows: list[dict[str, Any]] = []
    versions: dict[str, str] = {}
    for app in APPS:
        if app_names and app.name not in app_names:
            continue
        # The first task signs in: it always runs.
        tasks = [t for i, t in enumerate(app.tasks) if not names or i == 0 or t.name in names]
        print(f"{app.name}:", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            gateway = await gateway_side(app, work / "gateway", python, tasks)
            peer = await peer_side(app, work / "peer", python, tasks)
        rows += rows_of(app, tasks, gateway, peer)
        versions[app.name] = _version(python, app.package)
    notes = {
        **verdict(rows),
        "per app": {name: verdict([r for r in rows if r["app"] == name]) for name in versions},
        "peer": f"@playwright/mcp {version}, stdio, --headless --isolated",
        "gateway": "in-process on loopback, MCP door, official SDK client, agent token",
        "apps": {name: f"{name} {v}, SQLite, runserver" for name, v in versions.items()},
        "chromium": find_chromium(),
        "counted": "characters of the text blocks of every tool result, calls per task",
    }
    return rows, notes


def _version(python: Path, package: str) -> str:
    out = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
