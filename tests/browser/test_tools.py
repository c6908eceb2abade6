"""The browser tools through the pipeline: isolation between tasks, snapshot-bound refs,
the page each call acted on, and contexts that do not outlive their task."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from gateway.app import build_app
from gateway.browser import BrowserPool, BrowserProcesses, install
from gateway.browser import warm as warm_module
from gateway.browser.chromium import dropped_features
from gateway.browser.memory import command_line
from gateway.core.results import ToolStatus
from gateway.core.tokens import Purpose
from gateway.http import tasks as task_routes
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from tests.browser.conftest import (
    BrowserGateway,
    Sites,
    browser_gateway,
    browser_settings,
    snapshot_ref,
)
from tests.conftest import task_body

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def test_tasks_do_not_see_each_others_cookies_or_storage(browsers: BrowserGateway) -> None:
    a, b = await browsers.task(org="org_a"), await browsers.task(org="org_b")
    assert (await browsers.call(a, "browser.navigate", url="/set?who=alice")).ok
    assert (await browsers.call(a, "browser.navigate", url="/show")).ok
    seen_a = (await browsers.call(a, "browser.snapshot")).output["snapshot"]
    assert "cookie=who=alice" in seen_a and "storage=alice" in seen_a
    assert (await browsers.call(b, "browser.navigate", url="/show")).ok
    seen_b = (await browsers.call(b, "browser.snapshot")).output["snapshot"]
    assert "cookie=none" in seen_b and "storage=none" in seen_b
    session_a, session_b = browsers.pool.session(a.task_id), browsers.pool.session(b.task_id)
    assert session_a is not None and session_b is not None
    assert session_a.context is not session_b.context


async def test_snapshot_click_fill_press_wait_and_screenshot(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    nav = await browsers.call(task, "browser.navigate", url="/")
    assert nav.ok and nav.output["status"] == 200
    snap = await browsers.call(task, "browser.snapshot")
    assert snap.output["url"] == browsers.sites.allowed + "/"
    text = snap.output["snapshot"]
    assert 'heading "Agents"' in text
    field, save = snapshot_ref(text, "textbox"), snapshot_ref(text, "Save")
    assert (await browsers.call(task, "browser.fill", ref=field, value="Ada")).ok
    assert (await browsers.call(task, "browser.press", ref=field, key="End")).ok
    assert (await browsers.call(task, "browser.click", ref=save)).ok
    waited = await browsers.call(task, "browser.wait_for", text="Saved Ada", timeout_ms=3000)
    assert waited.ok, waited
    missing = await browsers.call(task, "browser.wait_for", text="never shown", timeout_ms=200)
    assert missing.status is ToolStatus.TIMEOUT
    shot = await browsers.call(task, "browser.screenshot")
    assert shot.ok
    ref = await browsers.gw.store.get_artifact(shot.output["artifact"]["artifact_id"])
    assert ref.task_id == task.task_id and ref.org_id == task.org_id
    assert (await browsers.gw.store.read_artifact(ref)).startswith(b"\x89PNG")
    calls = await browsers.evidence(task, "call")
    assert all(c["context"]["page"].startswith(browsers.sites.allowed) for c in calls)


async def test_navigate_hands_over_the_loaded_pages_snapshot(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    nav = await browsers.call(task, "browser.navigate", url="/")
    assert nav.ok and nav.output["status"] == 200
    assert 'heading "Agents"' in nav.output["snapshot"] and not nav.output["truncated"]
    # Its refs are the page's latest: an agent acts on them without a snapshot call.
    save = snapshot_ref(nav.output["snapshot"], "Save")
    assert save.startswith(nav.output["snapshot_id"] + ".")
    assert (await browsers.call(task, "browser.click", ref=save)).ok
    # Asked not to, navigate reads nothing; the refs of the last page are stale now.
    bare = await browsers.call(task, "browser.navigate", url="/", snapshot=False)
    assert bare.ok and "snapshot" not in bare.output
    stale = await browsers.call(task, "browser.click", ref=save)
    assert stale.error is not None and stale.error.code == "stale_target"
    # The snapshot is evidence like any output, and a link path is kept as it is.
    calls = await browsers.evidence(task, "call")
    assert 'heading "Agents"' in calls[0]["output"]["snapshot"]
    assert "-> /second" in calls[0]["output"]["snapshot"]


async def test_refs_go_stale_when_the_page_navigates(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/")).ok
    old = snapshot_ref((await browsers.call(task, "browser.snapshot")).output["snapshot"], "Save")
    link = snapshot_ref(
        (await browsers.call(task, "browser.snapshot")).output["snapshot"], "Second"
    )
    # A ref of an earlier snapshot of the same document still names its element.
    kept = await browsers.call(task, "browser.click", ref=old)
    assert kept.ok, kept
    assert "changes" in kept.output  # the same document: only what changed
    assert (await browsers.call(task, "browser.click", ref=link)).ok
    session = browsers.pool.session(task.task_id)
    assert session is not None and session.url.endswith("/second")
    # The same ref names exist on the new page; the old refs do not resolve there.
    stale = await browsers.call(task, "browser.click", ref=old)
    assert stale.error is not None and stale.error.code == "stale_target"
    again = await browsers.call(task, "browser.click", ref=link)
    assert again.status is ToolStatus.FAILED
    assert again.error is not None and again.error.code == "stale_target"
    fresh = await browsers.call(task, "browser.snapshot")
    assert "Second page" in fresh.output["snapshot"]


async def test_ending_the_task_closes_its_context(browsers: BrowserGateway) -> None:
    tasks = [await browsers.task() for _ in range(3)]
    for task in tasks:
        assert (await browsers.call(task, "browser.navigate", url="/")).ok
    assert browsers.pool.live_count() == 3
    contexts = [browsers.pool.session(t.task_id).context for t in tasks]  # type: ignore[union-attr]
    for task in tasks:
        await browsers.gw.tasks.end(task.task_id)
    assert browsers.pool.live_count() == 0
    for context in contexts:
        assert context not in browsers.gw.services.get(BrowserProcesses).live()[0].browser.contexts
    ended = await browsers.call(tasks[0], "browser.snapshot")
    assert ended.status is ToolStatus.DENIED
    assert browsers.pool.probe(tasks[0].task_id) == {"state": "closed"}
    closed = await browsers.evidence(tasks[0], "browser_closed")
    assert closed and closed[0]["data"]["reason"]


async def test_past_the_bound_a_call_is_unavailable_not_stuck(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path, sites, task_chromium, max_contexts=2) as b:
        gw = b.gw
        t1, t2, t3 = await b.task(), await b.task(), await b.task()
        assert (await b.call(t1, "browser.navigate", url="/")).ok
        assert (await b.call(t2, "browser.navigate", url="/")).ok
        refused = await b.call(t3, "browser.navigate", url="/")
        assert refused.status is ToolStatus.UNAVAILABLE
        assert refused.error is not None
        assert refused.error.code == "browser_unavailable" and refused.error.retryable
        await gw.tasks.end(t1.task_id)
        assert (await b.call(t3, "browser.navigate", url="/")).ok


async def test_as_deployed_the_jailed_chromium_and_a_warm_stock_are_ready_before_a_task_asks(
    tmp_path: Path, sites: Sites
) -> None:
    default_stock = Settings.model_fields["browser_warm_contexts"].default
    assert default_stock >= 1
    # The gateway's own Chromium, launched at its start as deployed, in its jail.
    async with browser_gateway(
        tmp_path, sites, browser_warm_contexts=default_stock, browser_launch_at_start=True
    ) as b:
        pool = b.pool
        assert b.gw.settings.browser_network_jail
        assert await pool.stocked() == default_stock
        [process] = pool.processes.live()
        assert process.pid is not None  # launched before any task asked for it
        stocked = {id(s.context) for s in pool.warm.sessions}
        # The first task's first call takes a context from the stock, already open.
        task = await b.task()
        assert (await b.call(task, "browser.navigate", url="/")).ok
        session = pool.session(task.task_id)
        assert session is not None and id(session.context) in stocked


async def test_warm_stock_hands_each_context_to_one_task(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(
        tmp_path, sites, task_chromium, browser_warm_contexts=2, max_contexts=4
    ) as b:
        gw = b.gw
        pool = gw.services.get(BrowserPool)
        assert await pool.stocked() == 2
        stocked = {id(s.context) for s in pool.warm.sessions}
        t1, t2 = await b.task(), await b.task()
        assert (await b.call(t1, "browser.navigate", url="/set?who=one")).ok
        assert (await b.call(t2, "browser.navigate", url="/show")).ok
        s1, s2 = pool.session(t1.task_id), pool.session(t2.task_id)
        assert s1 is not None and s2 is not None
        assert {id(s1.context), id(s2.context)} == stocked
        assert "cookie=none" in (await b.call(t2, "browser.snapshot")).output["snapshot"]
        await gw.tasks.end(t1.task_id)
        await gw.tasks.end(t2.task_id)
        assert pool.live_count() == 0


async def test_warm_stock_is_refilled_only_when_no_task_browser_is_busy(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_module, "WARM_REFILL_DELAY_S", 0.0)
    # Long enough that the refill cannot slip in between the navigate and the hold below.
    monkeypatch.setattr(warm_module, "WARM_REFILL_QUIET_S", 2.0)
    async with browser_gateway(
        tmp_path, sites, task_chromium, browser_warm_contexts=1, max_contexts=4
    ) as b:
        gw = b.gw
        pool = gw.services.get(BrowserPool)
        assert await pool.stocked() == 1
        task = await b.task()
        assert (await b.call(task, "browser.navigate", url="/")).ok
        session = pool.session(task.task_id)
        assert session is not None
        # While the task's browser runs a call, the stock is not refilled: opening a
        # context (its renderer's start) would take CPU from that call.
        async with session.lock:
            assert pool.quiet_for() == 0.0
            await asyncio.sleep(1.0)
            assert pool.warm_count() == 0
        assert await pool.stocked() == 1
        assert "gateway_browser_warm_contexts 1.0" in generate_latest(gw.metrics.registry).decode()


async def test_task_route_shows_the_browser_state(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    settings = browser_settings(tmp_path)
    gw = Gateway(settings)
    gw.services.provide(BrowserProcesses, task_chromium)
    app = build_app(gateway=gw, extensions=[task_routes.routes, install])
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        control = {"authorization": f"Bearer {settings.control_key}"}
        body = task_body(app_origin=sites.allowed, scopes=["browser"])
        created = (await http.post("/v1/tasks", json=body, headers=control)).json()
        task_id = created["task_id"]
        assert (await http.get(f"/v1/tasks/{task_id}", headers=control)).json()["browser"] == {
            "state": "none"
        }
        identity = await gw.tasks.authenticate(created["tokens"]["agent"], Purpose.AGENT)
        assert (await BrowserGateway(gw, sites).call(identity, "browser.navigate", url="/")).ok
        state = (await http.get(f"/v1/tasks/{task_id}", headers=control)).json()["browser"]
        assert state["state"] == "live" and state["url"] == sites.allowed + "/"
        assert (await http.delete(f"/v1/tasks/{task_id}", headers=control)).status_code == 200
        state = (await http.get(f"/v1/tasks/{task_id}", headers=control)).json()["browser"]
        assert state == {"state": "closed"}
        assert gw.services.get(BrowserPool).live_count() == 0


async def test_traces_and_screenshots_are_kept_under_the_task_owner(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(
        tmp_path, sites, task_chromium, browser_trace=True, browser_screenshots=True
    ) as b:
        gw = b.gw
        task = await b.task(org="org_t")
        assert (await b.call(task, "browser.navigate", url="/")).ok
        call = (await b.evidence(task, "call"))[0]
        shot = await gw.store.get_artifact(call["context"]["screenshot"])
        assert shot.org_id == "org_t" and shot.media_type == "image/png"
        await gw.tasks.end(task.task_id)
        closed = (await b.evidence(task, "browser_closed"))[0]
        trace = await gw.store.get_artifact(closed["data"]["trace"]["artifact_id"])
        assert trace.task_id == task.task_id and trace.media_type == "application/zip"
        assert (await gw.store.read_artifact(trace)).startswith(b"PK")


async def test_an_idle_context_is_closed_and_the_next_call_gets_a_fresh_one(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path, sites, task_chromium, browser_idle_s=0.2) as b:
        gw = b.gw
        pool = gw.services.get(BrowserPool)
        task = await b.task()
        assert (await b.call(task, "browser.navigate", url="/set?who=idle")).ok
        first = pool.session(task.task_id)
        closed: list[dict[str, object]] = []
        for _ in range(100):
            closed = await b.evidence(task, "browser_closed")
            if closed:
                break
            await asyncio.sleep(0.05)
        assert pool.live_count() == 0
        assert closed[0]["data"] == {"reason": "idle", "blocked": 0, "background_refused": 0}
        assert (await b.call(task, "browser.navigate", url="/show")).ok
        assert pool.session(task.task_id) is not first
        assert "cookie=none" in (await b.call(task, "browser.snapshot")).output["snapshot"]


async def test_the_pools_chromium_applies_playwrights_features_and_its_own(
    task_chromium: BrowserProcesses,
) -> None:
    [process] = task_chromium.live()
    assert process.pid is not None
    line = command_line(process.pid)
    # Playwright's switches come first, ours last: Chromium applies ours, which lose nothing.
    assert dropped_features(line) == {}
    applied = [a for a in line if a.startswith("--disable-features=")][-1]
    assert "RenderDocument" in applied.split("=", 1)[1].split(",")
    assert task_chromium.launches == 1  # no relaunch was needed to keep Playwright's features
