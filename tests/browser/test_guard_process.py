"""The guard in its own process, on real Chromium in its jail: a page's bytes go through
while the gateway's event loop is busy, refusals still reach the task, and a guard process
that dies is started again with every context's origins as they were."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.async_api import Page

from gateway.browser import BrowserProcesses
from gateway.browser.guard_process import GuardProcess
from gateway.browser.guards import BlockedRequest, ContextGuard
from gateway.browser.jail import open_guard
from gateway.testing.waiting import until
from tests.browser.conftest import Sites, task_chromium

__all__ = ["task_chromium"]

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# A page that, once told, asks for /late by itself a moment later.
PAGE = b"""<!doctype html><title>late</title>
<script>window.later = () => setTimeout(
  () => fetch('/late').then(r => r.text()).then(t => { window.late = t; }), 300);
</script>"""


class Arrivals:
    """When each path reached the app (time.monotonic)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}


@contextlib.contextmanager
def threaded_app() -> Iterator[tuple[str, Arrivals]]:
    """An app served by a thread of its own, so it answers whatever this event loop does."""
    arrivals = Arrivals()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrivals.at[self.path] = time.monotonic()
            body = PAGE if self.path == "/" else b"on time"
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if self.path == "/" else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", arrivals
    finally:
        server.shutdown()
        server.server_close()


@contextlib.asynccontextmanager
async def guarded_page(
    processes: BrowserProcesses, origin: str, blocked: list[BlockedRequest]
) -> AsyncIterator[tuple[ContextGuard, Page]]:
    process = processes.live()[0]
    guard: ContextGuard = await open_guard(process.jail, process.pid, blocked.append)
    guard.allow(frozenset({origin}))
    await guard.synced()
    context = await process.browser.new_context(proxy={"server": guard.url})
    try:
        yield guard, await context.new_page()
    finally:
        await context.close()
        await guard.close()


async def test_the_guard_runs_in_a_process_of_its_own(task_chromium: BrowserProcesses) -> None:
    jail = task_chromium.jail
    assert jail is not None and jail.worker is not None
    assert jail.worker.pid not in (None, os.getpid())


async def test_a_page_loads_while_the_gateway_loop_is_busy(
    task_chromium: BrowserProcesses,
) -> None:
    blocked: list[BlockedRequest] = []
    with threaded_app() as (origin, arrivals):
        async with guarded_page(task_chromium, origin, blocked) as (_guard, page):
            await page.goto(origin + "/")
            await page.evaluate("window.later()")
            # The loop that serves tool calls is held for a second and a half; the page
            # asks for /late during it, by itself.
            busy_from = time.monotonic()
            time.sleep(1.5)  # noqa: ASYNC251 - holding the loop is what is tested
            busy_until = time.monotonic()
            await page.wait_for_function("window.late === 'on time'", timeout=10_000)
    # The request reached the app while the loop was held: the guard did not wait for it.
    assert busy_from < arrivals.at["/late"] < busy_until
    assert blocked == []


async def test_a_refusal_reaches_the_gateway_before_the_page_has_it(
    task_chromium: BrowserProcesses, sites: Sites
) -> None:
    blocked: list[BlockedRequest] = []
    with threaded_app() as (origin, _arrivals):
        async with guarded_page(task_chromium, origin, blocked) as (guard, page):
            await page.goto(origin + "/")
            with contextlib.suppress(Exception):
                await page.goto(sites.foreign + "/", timeout=5000)
            # Read at once, with no wait: the refusal was told before the page's answer.
            assert [b.target for b in blocked] == [sites.foreign + "/"]
            assert blocked[0].navigation
            assert (await guard.counts()).blocked == 1
    assert sites.log.requests == []


async def test_a_guard_process_that_dies_is_started_again_as_it_was(
    task_chromium: BrowserProcesses, sites: Sites
) -> None:
    jail = task_chromium.jail
    assert jail is not None and jail.worker is not None
    worker = jail.worker
    blocked: list[BlockedRequest] = []
    with threaded_app() as (origin, arrivals):
        async with guarded_page(task_chromium, origin, blocked) as (guard, page):
            await page.goto(origin + "/")
            starts, pid = worker.starts, worker.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await until(lambda: worker.starts > starts, "the guard process started again")
            assert worker.pid != pid
            await guard.synced()
            # The context's origins came back with it: its own still go out, others do not.
            arrivals.at.clear()
            await page.goto(origin + "/")
            assert "/" in arrivals.at
            with contextlib.suppress(Exception):
                await page.goto(sites.foreign + "/", timeout=5000)
            assert [b.target for b in blocked] == [sites.foreign + "/"]
    assert sites.log.requests == []


async def test_a_question_the_guard_process_cannot_answer_is_answered_with_why() -> None:
    process = GuardProcess()
    await process.start()
    try:
        answer, _ = await process.ask({"op": "counts", "address": "127.9.9.9"})
        assert "KeyError" in answer["error"]
        answer, _ = await process.ask({"op": "no such thing"})
        assert "unknown message" in answer["error"]
        # And it is still serving.
        answer, _ = await process.ask({"op": "synced"})
        assert "error" not in answer
    finally:
        await process.close()


async def test_a_question_asked_as_the_guard_process_dies_is_answered_by_the_next(
    task_chromium: BrowserProcesses,
) -> None:
    jail = task_chromium.jail
    assert jail is not None and jail.worker is not None
    worker = jail.worker
    with threaded_app() as (origin, _arrivals):
        async with guarded_page(task_chromium, origin, []) as (guard, _page):
            pid = worker.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            # No wait for the restart: the question waits for the next process.
            await guard.synced()
            assert (await guard.counts()).blocked == 0
            assert worker.pid not in (None, pid)


async def test_a_routed_origin_is_reached_only_through_the_gateways_opener(
    task_chromium: BrowserProcesses,
) -> None:
    asked: list[str] = []

    async def refusing() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # A provisioned app that is down: the gateway's route refuses the stream.
        asked.append("refused")
        raise ConnectionRefusedError("the task's app is down")

    with threaded_app() as (origin, arrivals):
        async with guarded_page(task_chromium, origin, []) as (guard, page):
            guard.route(origin, refusing)
            await guard.synced()
            response = await page.goto(origin + "/")
            # The guard asked the gateway, was refused, and did not dial the origin itself
            # (the app listening there heard nothing).
            assert response is not None and response.status == 502
            assert asked and arrivals.at == {}
