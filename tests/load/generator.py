"""The world around the gateway under load, in a process of its own: the app the task
browsers visit (and a foreign site), the dashboard with its pages in their own Chromium,
and the clients of the three doors. The gateway under load has its event loop to itself,
as it has in production.

In one process with the gateway, the callers' own work (64 MCP SDK clients, 64 bridge
clients, the Playwright driver's replies for 64 pages, the app's pages) would run on the
gateway's event loop: a ready gateway handler would wait behind it, that wait would count
as the gateway's, and callers slowed by the gateway would offer it less load than they
mean to.

`python -m tests.load.generator` first writes one JSON line with the sites' addresses,
`{"app": url, "dashboard": url}`, then reads one command per line on stdin and answers
each with one JSON line on stdout (`Generator` is the other end):

- `{"op": "open", "gateway": url, "tasks": [task body, ...], "contexts": n}`: opens each
  task's dashboard page (the tab channel connected to the gateway), spread over `n`
  browser contexts, and seeds its workspace; answers `{"opened": count}`;
- `{"op": "run", "calls": n}`: every open task's three door workers at once, `n` calls per
  task; answers `{"outcomes": [[door, tool, status, code, seconds], ...]}`;
- `{"op": "close"}`: closes the pages and their contexts; answers `{"closed": true}`.

A command that fails answers `{"error": "..."}`. End of input ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import traceback
from dataclasses import astuple
from typing import Any

from playwright.async_api import Browser, BrowserContext, async_playwright

from gateway.browser.chromium import find_chromium, launch_args
from gateway.serving import serving
from tests.browser.site import ForeignLog, allowed_app, foreign_app
from tests.load.harness import CALL_BOUND_S, Doors, Ledger, LoadTask, Outcome, seed_workspace
from tests.tabs.dashboard import dashboard_app

# A line of outcomes from a full run is about a megabyte.
LINE_LIMIT = 64 * 1024 * 1024


def split(calls: int) -> tuple[int, int, int]:
    """Calls per door: MCP 40 %, the page 30 %, the bridge the rest."""
    mcp, page = calls * 4 // 10, calls * 3 // 10
    return mcp, page, calls - mcp - page


class Callers:
    """The state of one generator process: its Chromium and the tasks it has open."""

    def __init__(self, dashboard: str, browser: Browser) -> None:
        self.base_url = ""
        self.dashboard = dashboard
        self.browser = browser
        self.tasks: list[LoadTask] = []
        self.contexts: list[BrowserContext] = []

    async def open(
        self, base_url: str, bodies: list[dict[str, Any]], contexts: int
    ) -> dict[str, Any]:
        self.base_url = base_url
        self.contexts = [await self.browser.new_context() for _ in range(contexts)]
        tasks = [LoadTask(body) for body in bodies]
        doors = Doors(self.base_url, Ledger())
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    doors.open_tab(self.contexts[i % contexts], self.dashboard, task)
                    for i, task in enumerate(tasks)
                )
            ),
            CALL_BOUND_S * 4,
        )
        await asyncio.wait_for(
            asyncio.gather(*(seed_workspace(self.base_url, t) for t in tasks)), CALL_BOUND_S
        )
        self.tasks = tasks
        return {"opened": len(tasks)}

    async def run(self, calls: int) -> dict[str, Any]:
        ledger = Ledger()
        doors = Doors(self.base_url, ledger)
        mcp, page, bridge = split(calls)
        # No bound of its own: every call inside is bounded by CALL_BOUND_S.
        await asyncio.gather(
            *(
                worker
                for task in self.tasks
                for worker in (
                    doors.mcp_worker(task, mcp),
                    doors.page_worker(task, page),
                    doors.bridge_worker(task, bridge),
                )
            )
        )
        return {"outcomes": [astuple(outcome) for outcome in ledger.outcomes]}

    async def close(self) -> dict[str, Any]:
        for context in self.contexts:
            with contextlib.suppress(Exception):
                await context.close()
        self.contexts, self.tasks = [], []
        return {"closed": True}

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "open":
            return await self.open(
                command["gateway"], command["tasks"], int(command.get("contexts", 1))
            )
        if op == "run":
            return await self.run(int(command["calls"]))
        if op == "close":
            return await self.close()
        return {"error": f"unknown op {op!r}"}


def answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with (
        serving(foreign_app(ForeignLog())) as foreign,
        serving(allowed_app(foreign)) as app,
        serving(dashboard_app()) as dashboard,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(
            executable_path=find_chromium(), args=launch_args(webmcp=True)
        )
        answer({"app": app, "dashboard": dashboard})
        callers = Callers(dashboard, browser)
        try:
            while line := await reader.readline():
                try:
                    answer(await callers.handle(json.loads(line)))
                except Exception as error:  # answered, so the test can say what failed
                    answer({"error": "".join(traceback.format_exception(error))[-4000:]})
        finally:
            await callers.close()
            await browser.close()


class Generator:
    """The test's end of a generator process: `async with Generator() as world`, then
    `world.app` and `world.dashboard` are the sites' addresses."""

    def __init__(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self.app = self.dashboard = ""

    async def __aenter__(self) -> Generator:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.load.generator",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
            # A session of its own: Linux schedules sessions as groups (autogroup), and the
            # gateway's callers are not the gateway's to share a group with.
            start_new_session=True,
        )
        try:
            sites = await self._answer("start", CALL_BOUND_S)
        except BaseException:
            await self.__aexit__()
            raise
        self.app, self.dashboard = sites["app"], sites["dashboard"]
        return self

    async def __aexit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 60)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def _ask(self, command: dict[str, Any], bound_s: float | None) -> dict[str, Any]:
        process = self.process
        if process is None:
            raise RuntimeError(f"the load generator is gone; {command['op']} not sent")
        assert process.stdin is not None
        process.stdin.write((json.dumps(command) + "\n").encode())
        await process.stdin.drain()
        return await self._answer(command["op"], bound_s)

    async def _answer(self, op: str, bound_s: float | None) -> dict[str, Any]:
        process = self.process
        assert process is not None and process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), bound_s)
        except TimeoutError:
            # Its answers would no longer match the questions: it goes, and says why.
            self.process = None
            process.kill()
            await process.wait()
            raise TimeoutError(f"the load generator did not answer {op} in {bound_s} s") from None
        if not line:
            self.process = None
            raise RuntimeError(f"the load generator ended (exit {await process.wait()})")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"the load generator failed {op}: {message['error']}")
        return message

    async def open(self, gateway: str, tasks: list[LoadTask], contexts: int) -> None:
        command = {
            "op": "open",
            "gateway": gateway,
            "tasks": [task.body for task in tasks],
            "contexts": contexts,
        }
        await self._ask(command, CALL_BOUND_S * 6)

    async def run(self, calls: int, ledger: Ledger) -> None:
        """Every open task's workers, `calls` each; their outcomes go into `ledger`."""
        # No bound here: each call is bounded in the generator, and the test's timeout
        # bounds the whole run.
        answer = await self._ask({"op": "run", "calls": calls}, None)
        ledger.outcomes.extend(Outcome(*row) for row in answer["outcomes"])

    async def close(self) -> None:
        """Close the open tasks' pages; nothing to do once the generator is gone (a
        failure before this one already said why)."""
        if self.process is not None:
            await self._ask({"op": "close"}, CALL_BOUND_S)


if __name__ == "__main__":
    asyncio.run(serve())
