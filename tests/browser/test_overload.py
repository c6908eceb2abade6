"""Load shedding of the task browser, from the caller's side, with a real Chromium.

The gateways here have one action slot per Chromium process, and the app has a page that
does not answer until the test lets it (`/hold`): a navigation to it holds the slot for
as long as the test likes, so who waits and who is turned away is decided by counts, never
by how fast the machine is. What is checked: a call that could not be served in time ends
at once `unavailable`/`overloaded` with a retry hint, counted, and without touching its
page; every admitted call still ends with one result and one evidence record; a queued call
whose deadline draws near leaves the queue rather than timing out; the HTTP bridge says 503
with `Retry-After`, the MCP door the retry hint; and once the load is gone, calls get in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Page
from prometheus_client import generate_latest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gateway.bridge import BridgeClient, load_bridge, sandbox_env_values
from gateway.browser import BrowserPool, BrowserProcesses
from gateway.browser.admission import Admission
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import ToolResult, ToolStatus
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.testing import live_gateway
from gateway.testing.waiting import until
from mcp import Client
from tests.browser.conftest import Sites, browser_gateway, browser_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

BOUND_S = 60.0  # a wait in the test that should end at once; only a broken gateway hits it
WAITING = 2  # calls waiting behind a held slot
BURST = 6  # tasks acting at the same moment on one slot


@dataclass
class HeldApp:
    """The sandbox app: `/hold` answers once `release` is set; `/slow` after 1 s. Every
    path it is asked for is logged, so a test can show that a page was never loaded."""

    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    paths: list[str] = field(default_factory=list)

    def asgi(self) -> Starlette:
        async def page(request: Request) -> HTMLResponse:
            self.paths.append(request.url.path)
            if request.url.path == "/hold":
                self.arrived.set()
                await self.release.wait()
            elif request.url.path == "/slow":
                await asyncio.sleep(1.0)
            title = request.url.path.strip("/") or "home"
            return HTMLResponse(
                f"<!doctype html><title>{title}</title><h1>Page {title}</h1><button>Save</button>"
            )

        return Starlette(routes=[Route("/{path:path}", page)])


@contextlib.asynccontextmanager
async def held_app() -> AsyncIterator[tuple[HeldApp, str]]:
    app = HeldApp()
    try:
        async with serving(app.asgi()) as origin:
            yield app, origin
    finally:
        app.release.set()  # nothing stays held past the test


def overloaded(result: ToolResult) -> int:
    """The retry hint of an `overloaded` result (it fails the test for any other)."""
    assert result.status is ToolStatus.UNAVAILABLE, result
    assert result.error is not None and result.error.code == "overloaded", result
    assert result.error.retryable
    assert result.error.details is not None
    retry_after: int = result.error.details["retry_after_s"]
    assert isinstance(retry_after, int) and retry_after >= 1
    return retry_after


def metric(registry: Any, line_start: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {line_start}")


class NoInput(BaseModel):
    pass


def title_tool(name: str, timeout_s: float) -> Tool:
    """A tool whose deadline is short: it reads the page's title in the task's browser."""

    async def handler(ctx: ToolContext, _args: NoInput) -> dict[str, Any]:
        session = await ctx.service(BrowserPool).session_for(ctx.identity)

        async def read(page: Page) -> str:
            title: str = await page.title()
            return title

        return {"title": await session.run(ctx, read)}

    return Tool(
        name=name,
        title="Page title",
        description="The page's title.",
        input_model=NoInput,
        handler=handler,
        scopes=frozenset({"browser"}),
        timeout_s=timeout_s,
    )


async def holding(call: Awaitable[Any], app: HeldApp, admission: Admission) -> asyncio.Future[Any]:
    """Start `call`, a navigation to `/hold`, and return once it holds the only slot."""
    held = asyncio.ensure_future(call)
    async with asyncio.timeout(BOUND_S):
        await app.arrived.wait()
    assert admission.running == admission.slots == 1
    return held


async def test_a_call_the_full_browser_cannot_serve_is_turned_away_at_once_untouched(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with (
        held_app() as (app, origin),
        browser_gateway(tmp_path, sites, task_chromium, browser_actions_per_process=1) as b,
    ):
        # The gateway's own navigate, given 1 s: less than the work that will be ahead of it.
        navigate = b.gw.registry.get("browser.navigate")
        assert navigate is not None
        b.gw.registry.add(dataclasses.replace(navigate, name="test.navigate_1s", timeout_s=1.0))
        admission = b.pool.admissions[0]
        holder, late = await b.task(app_origin=origin), await b.task(app_origin=origin)
        waiting = [await b.task(app_origin=origin) for _ in range(WAITING)]
        # The holder's page is known to take at least 1 s (`/slow` does).
        assert (await b.call(holder, "browser.navigate", url="/slow")).ok
        for task in (holder, late, *waiting):
            assert (await b.call(task, "browser.navigate", url="/")).ok
        home = origin + "/"

        held = await holding(b.call(holder, "browser.navigate", url="/hold"), app, admission)
        queued = [asyncio.ensure_future(b.call(t, "browser.navigate", url="/")) for t in waiting]
        await until(lambda: admission.queued == len(waiting), "the calls wait their turn")

        # At least 1 s of work is ahead (the held page's action) and the call has 1 s: it
        # ends now, while all of them are still waiting (it is not queued behind them).
        shed = await asyncio.wait_for(b.call(late, "test.navigate_1s", url="/second"), BOUND_S)
        overloaded(shed)
        assert not held.done() and not any(q.done() for q in queued)
        registry = b.gw.metrics.registry
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 1
        assert metric(registry, 'gateway_browser_queue{process="0"}') == len(waiting)
        # It never reached the page: not loaded, and the page is where it was.
        assert "/second" not in app.paths
        session = b.pool.session(late.task_id)
        assert session is not None and session.url == home
        [*_, record] = await b.evidence(late, "call")
        assert record["status"] == "unavailable" and record["error"]["code"] == "overloaded"
        assert record["context"] == {"page": home, "admission": {"shed": True}}

        # The load goes: every admitted call ends, once, as it would have.
        app.release.set()
        results = await asyncio.wait_for(asyncio.gather(held, *queued), BOUND_S)
        assert [r.status for r in results] == [ToolStatus.SUCCEEDED] * len(results)
        assert results[0].output["url"] == origin + "/hold"
        assert all("Page home" in r.output["snapshot"] for r in results[1:])
        # One evidence record per call, each task's calls all there.
        for task, calls in ((holder, 3), (late, 2), *((t, 2) for t in waiting)):
            assert len(await b.evidence(task, "call")) == calls, task.task_id
        assert admission.queued == 0 and admission.running == 0
        assert metric(registry, 'gateway_browser_queue{process="0"}') == 0

        # Calls are admitted again.
        again = await b.call(late, "browser.navigate", url="/second")
        assert again.ok, again
        assert app.paths.count("/second") == 1
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 1


async def test_a_first_call_that_would_not_start_in_time_is_turned_away_and_opens_nothing(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with (
        held_app() as (app, origin),
        browser_gateway(tmp_path, sites, task_chromium, browser_actions_per_process=1) as b,
    ):
        navigate = b.gw.registry.get("browser.navigate")
        assert navigate is not None
        b.gw.registry.add(dataclasses.replace(navigate, name="test.navigate_1s", timeout_s=1.0))
        starts, admission = b.pool.starts, b.pool.admissions[0]
        first = [await b.task(app_origin=origin) for _ in range(starts.slots)]
        late = await b.task(app_origin=origin)
        # Every task start is taken by a first call not yet over: one holds the only action
        # slot on `/hold`, the others wait for it.
        held = await holding(b.call(first[0], "browser.navigate", url="/hold"), app, admission)
        waiting = [asyncio.ensure_future(b.call(t, "browser.navigate", url="/")) for t in first[1:]]
        await until(lambda: admission.queued == len(waiting), "the first calls wait their turn")
        assert starts.running == starts.slots

        # A first call with 1 s left cannot wait for a start and make one: out at once,
        # with no context opened for it, rather than in line past its deadline.
        shed = await asyncio.wait_for(b.call(late, "test.navigate_1s", url="/"), BOUND_S)
        overloaded(shed)
        assert shed.error is not None and "task starts" in shed.error.message
        assert b.pool.session(late.task_id) is None
        assert not held.done() and not any(w.done() for w in waiting)
        registry = b.gw.metrics.registry
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 1

        app.release.set()
        results = await asyncio.wait_for(asyncio.gather(held, *waiting), BOUND_S)
        assert all(r.ok for r in results), results
        # Each start was held from its context's opening to the end of its first call.
        assert starts.running == 0 and starts.measured == starts.slots
        again = await b.call(late, "browser.navigate", url="/")
        assert again.ok, again


async def test_a_snapshot_does_not_wait_behind_another_tasks_action(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with (
        held_app() as (app, origin),
        browser_gateway(tmp_path, sites, task_chromium, browser_actions_per_process=1) as b,
    ):
        admission, reads = b.pool.admissions[0], b.pool.read_admissions[0]
        holder, reader, actor = [await b.task(app_origin=origin) for _ in range(3)]
        for task in (holder, reader, actor):
            assert (await b.call(task, "browser.navigate", url="/")).ok
        held = await holding(b.call(holder, "browser.navigate", url="/hold"), app, admission)
        # The one action slot is held: another task's navigate waits for it...
        waiting = asyncio.ensure_future(b.call(actor, "browser.navigate", url="/second"))
        await until(lambda: admission.queued == 1, "the action waits its turn")
        # ...while a snapshot, which only reads its page, is answered in a read slot.
        snap = await asyncio.wait_for(b.call(reader, "browser.snapshot"), BOUND_S)
        assert snap.ok and "Page home" in snap.output["snapshot"], snap
        assert not held.done() and not waiting.done()
        [*_, record] = await b.evidence(reader, "call")
        assert "admission" not in record.get("context", {})
        assert reads.queued == 0 and reads.running == 0 and reads.measured >= 1
        registry = b.gw.metrics.registry
        assert metric(registry, 'gateway_browser_read_queue{process="0"}') == 0
        assert metric(registry, 'gateway_browser_queue{process="0"}') == 1

        app.release.set()
        results = await asyncio.wait_for(asyncio.gather(held, waiting), BOUND_S)
        assert all(r.ok for r in results), results
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 0


async def test_a_burst_that_fits_its_deadlines_waits_and_is_served(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with (
        held_app() as (app, origin),
        browser_gateway(tmp_path, sites, task_chromium, browser_actions_per_process=1) as b,
    ):
        admission = b.pool.admissions[0]
        holder, *burst = [await b.task(app_origin=origin) for _ in range(1 + BURST)]
        for task in (holder, *burst):
            assert (await b.call(task, "browser.navigate", url="/")).ok
        held = await holding(b.call(holder, "browser.navigate", url="/hold"), app, admission)
        # Every task acts at the same moment, the one slot taken: a few light actions ahead
        # of each, a minute to do them in. They all wait; none is told to retry.
        calls = [
            asyncio.ensure_future(b.call(t, "browser.navigate", url=f"/page{i}"))
            for i, t in enumerate(burst)
        ]
        await until(lambda: admission.queued == BURST, "the whole burst waits its turn")
        assert not any(c.done() for c in calls)
        registry = b.gw.metrics.registry
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 0

        app.release.set()
        results = await asyncio.wait_for(asyncio.gather(held, *calls), BOUND_S)
        assert all(r.ok for r in results), results
        for i, (task, result) in enumerate(zip(burst, results[1:], strict=True)):
            assert result.output["url"] == f"{origin}/page{i}"
            [*_, record] = await b.evidence(task, "call")
            assert record["context"]["admission"]["waited_ms"] > 0
        assert admission.queued == 0 and admission.running == 0
        assert metric(registry, 'gateway_calls_shed_total{resource="browser"}') == 0


async def test_deadlines_decide_who_waits_and_a_waiting_call_leaves_before_its_own(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with (
        held_app() as (app, origin),
        browser_gateway(tmp_path, sites, task_chromium, browser_actions_per_process=1) as b,
    ):
        # Both read a page title, one with 2 s to do it, the other with 8 s.
        b.gw.registry.add(title_tool("test.title_short", 2.0))
        b.gw.registry.add(title_tool("test.title_long", 8.0))
        admission = b.pool.admissions[0]
        holder, short, patient = [await b.task(app_origin=origin) for _ in range(3)]
        # The first action measured sets the estimate: at least 1 s (`/slow` takes that).
        assert (await b.call(holder, "browser.navigate", url="/slow")).ok
        assert admission.measured == 1 and admission.average_s >= 1.0

        held = await holding(b.call(holder, "browser.navigate", url="/hold"), app, admission)
        # 2 s cannot hold a wait of about one action and the action itself: out at once.
        turned_away = await asyncio.wait_for(b.call(short, "test.title_short"), BOUND_S)
        overloaded(turned_away)
        assert admission.queued == 0
        # 8 s can: it waits. The slot does not come; before its deadline it leaves, the
        # same way, instead of ending as a timeout.
        waiter = asyncio.ensure_future(b.call(patient, "test.title_long"))
        await until(lambda: admission.queued == 1, "the call with time waits")
        left = await asyncio.wait_for(waiter, BOUND_S)
        overloaded(left)
        assert admission.queued == 0 and not held.done()
        for task in (short, patient):
            # Neither page was touched: the contexts were opened, never navigated.
            session = b.pool.session(task.task_id)
            assert session is not None and session.url == "about:blank"
            [record] = await b.evidence(task, "call")
            assert record["status"] == "unavailable"
            assert record["context"] == {"page": "about:blank", "admission": {"shed": True}}
        assert metric(b.gw.metrics.registry, 'gateway_calls_shed_total{resource="browser"}') == 2

        app.release.set()
        assert (await asyncio.wait_for(held, BOUND_S)).ok
        # With the slot free, even the short deadline gets in.
        title = await b.call(short, "test.title_short")
        assert title.ok and title.output == {"title": ""}, title


def _bridge(base_url: str, body: dict[str, Any]) -> BridgeClient:
    envelope = load_bridge(body["parent_tool_bridge"])
    env = sandbox_env_values(envelope, body["tokens"]["bridge"])
    assert envelope.dispatcher.endpoint is not None
    env[envelope.dispatcher.endpoint.url_env] = f"{base_url}/v1/parent-tools"
    return BridgeClient.from_envelope(envelope, env=env)


async def test_the_http_bridge_says_503_with_retry_after_and_mcp_the_retry_hint(
    tmp_path: Path, task_chromium: BrowserProcesses
) -> None:
    # One call may wait: the next is turned away by count, whatever its deadline.
    settings = browser_settings(tmp_path, browser_actions_per_process=1, browser_waiting_per_slot=1)

    def share_chromium(gw: Gateway) -> None:
        gw.services.provide(BrowserProcesses, task_chromium)

    async with (
        held_app() as (app, origin),
        live_gateway(settings, setup=share_chromium) as live,
    ):
        admission = live.gateway.services.get(BrowserPool).admissions[0]
        # The one holding the slot, those waiting, the one turned away, and an MCP agent.
        assert admission.max_waiting == 1
        count = 1 + admission.max_waiting + 2
        bodies = [
            await live.create_task(scopes=["browser"], app_origin=origin) for _ in range(count)
        ]
        holder, *waiting, late = (_bridge(live.base_url, body) for body in bodies[:-1])
        for client in (holder, *waiting, late):
            assert (await client.call("browser.navigate", {"url": "/"})).ok

        held = await holding(holder.call("browser.navigate", {"url": "/hold"}), app, admission)
        queued = [asyncio.ensure_future(c.call("browser.navigate", {"url": "/"})) for c in waiting]
        await until(lambda: admission.queued == len(waiting), "the calls wait their turn")

        # A plain HTTP client: 503, Retry-After, and the usual result envelope.
        request = late.request("browser.navigate", {"url": "/second"})
        async with httpx.AsyncClient(base_url=live.base_url, timeout=BOUND_S) as http:
            response = await http.post(
                "/v1/parent-tools",
                json=request.wire(),
                headers={"authorization": f"Bearer {bodies[-2]['tokens']['bridge']}"},
            )
        assert response.status_code == 503, response.text
        envelope = response.json()
        assert envelope["status"] == "unavailable"
        assert envelope["error"]["code"] == "overloaded" and envelope["error"]["retryable"]
        retry_after = envelope["diagnostics"]["details"]["retry_after_s"]
        assert int(response.headers["retry-after"]) == retry_after >= 1
        # The bridge's own client reads the envelope of a 503 as it is.
        again = await late.call("browser.navigate", {"url": "/second"})
        assert again.status == "unavailable" and again.error is not None
        assert again.error.code == "overloaded"

        # The MCP door: the error as ever, and when to retry, for the model and in the
        # structured content.
        token = bodies[-1]["tokens"]["agent"]
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}) as mcp_http,
            Client(streamable_http_client(f"{live.base_url}/v1/mcp", http_client=mcp_http)) as mcp,
        ):
            result = await mcp.call_tool("browser.navigate", {"url": "/"})
        assert result.is_error
        content: dict[str, Any] = result.structured_content or {}
        assert content["status"] == "unavailable"
        assert content["error"]["code"] == "overloaded"
        hint = content["error"]["details"]["retry_after_s"]
        assert hint >= 1
        [text] = [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]
        assert f"retryable: yes; retry after {hint} s" in text.splitlines()
        assert "/second" not in app.paths

        app.release.set()
        done = await asyncio.wait_for(asyncio.gather(held, *queued), BOUND_S)
        assert all(r.ok for r in done), done
        # Once the load is gone, the same request gets in (200).
        retried = await late.call("browser.navigate", {"url": "/second"})
        assert retried.ok, retried
        assert (
            metric(live.gateway.metrics.registry, 'gateway_calls_shed_total{resource="browser"}')
            == 3
        )
