"""The origin guard, tried from the page's side: every way out is stopped before the
foreign server sees a request, the page is never left on a foreign origin, the call that
tried ends denied/origin_blocked, and the attempt is in the task's evidence."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.origins import is_allowed
from gateway.core.results import ToolStatus
from gateway.testing.agents import McpAgent
from gateway.testing.evidence import Evidence
from gateway.testing.pytest_plugin import GatewayHandle, TaskFactory
from gateway.testing.script import Step, run_script
from tests.browser.conftest import BrowserGateway, snapshot_ref

pytestmark = [pytest.mark.browser]
# Tests that need the two-origin site and its foreign server's request log drive a gateway in
# process (`browsers`); the others are written on the pytest plugin's fixtures.
in_process = pytest.mark.asyncio(loop_scope="session")


async def _click(b: BrowserGateway, identity: object, label: str) -> object:
    snap = await b.call(identity, "browser.snapshot")  # type: ignore[arg-type]
    assert snap.ok, snap
    ref = snapshot_ref(snap.output["snapshot"], label)
    return await b.call(identity, "browser.click", ref=ref)  # type: ignore[arg-type]


async def _denied_now_or_next(b: BrowserGateway, identity: object, result: object) -> None:
    """A page's escape is reported by the call that caused it or, when the browser got to
    it only after that call returned, by the task's next call."""
    if result.status is ToolStatus.DENIED:  # type: ignore[attr-defined]
        assert result.error.code == "origin_blocked"  # type: ignore[attr-defined]
        return
    following = await b.call(identity, "browser.snapshot")  # type: ignore[arg-type]
    assert following.status is ToolStatus.DENIED, (result, following)
    assert following.error is not None and following.error.code == "origin_blocked"


async def _back_on_an_allowed_page(b: BrowserGateway, identity: object, path: str) -> None:
    """Navigate until a call ends clean. A navigation the page started on the last click
    (a `javascript:` URL runs later) can still be under way: it may abort the next navigate
    (`failed`, net::ERR_ABORTED), and its refusal is reported by whichever call returns
    after the guard saw it (`denied`). Once both are over, a navigate succeeds."""
    outcomes = []
    for _ in range(3):
        result = await b.call(identity, "browser.navigate", url=path)  # type: ignore[arg-type]
        if result.ok:
            return
        outcomes.append(result)
        assert result.error is not None
        assert result.error.code in ("origin_blocked", "handler_error"), result
    raise AssertionError(f"no clean navigation to {path}: {outcomes}")


async def _page_is_allowed(b: BrowserGateway, identity: object) -> str:
    session = b.pool.session(identity.task_id)  # type: ignore[attr-defined]
    assert session is not None
    url = session.page.url
    assert url == "about:blank" or is_allowed(url, frozenset({b.sites.allowed})), url
    return url


@in_process
async def test_server_redirect_to_foreign_is_stopped(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    result = await browsers.call(task, "browser.navigate", url="/redirect")
    assert result.status is ToolStatus.DENIED
    assert result.error is not None and result.error.code == "origin_blocked"
    assert browsers.sites.log.requests == []
    await _page_is_allowed(browsers, task)
    blocked = await browsers.evidence(task, "origin_blocked")
    assert any(browsers.sites.foreign in r["data"]["target"] for r in blocked)
    call = [r for r in await browsers.evidence(task, "call") if r["tool"] == "browser.navigate"]
    assert call[0]["status"] == "denied"


@in_process
async def test_script_navigation_is_stopped(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/location")).ok
    result = await _click(browsers, task, "Leave")
    await _denied_now_or_next(browsers, task, result)
    assert browsers.sites.log.requests == []
    assert (await _page_is_allowed(browsers, task)).endswith("/location")


@in_process
async def test_meta_refresh_is_stopped(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    first = await browsers.call(task, "browser.navigate", url="/meta")
    # The refresh fires right after load: it is reported by this call or the next one.
    second = await browsers.call(task, "browser.snapshot")
    statuses = {first.status, second.status}
    assert ToolStatus.DENIED in statuses, (first, second)
    assert browsers.sites.log.requests == []
    await _page_is_allowed(browsers, task)


@in_process
async def test_foreign_frame_and_subresources_never_load(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    framed = await browsers.call(task, "browser.navigate", url="/frame")
    assert framed.status is ToolStatus.DENIED
    assert framed.error is not None and framed.error.code == "origin_blocked"
    images = await browsers.call(task, "browser.navigate", url="/subresource")
    # The page itself stays usable; the refused requests are evidence.
    assert images.ok, images
    # The page's scripts open a websocket and a fetch after load: wait for their refusal.
    tunnel = browsers.sites.foreign.removeprefix("http://")
    targets: list[str] = []
    for _ in range(100):
        await browsers.call(task, "browser.snapshot")
        targets = [r["data"]["target"] for r in await browsers.evidence(task, "origin_blocked")]
        if tunnel in targets and any(t.endswith("/fetch") for t in targets):
            break
        await asyncio.sleep(0.05)
    assert browsers.sites.log.requests == []
    assert any(t.endswith("/frame") for t in targets)
    assert any(t.endswith("/pixel.png") for t in targets)
    assert any(t.endswith("/script.js") for t in targets)
    # The websocket's tunnel was refused at its CONNECT.
    assert tunnel in targets
    navigations = [
        r
        for r in await browsers.evidence(task, "call")
        if r["tool"] == "browser.navigate" and r["status"] == "succeeded"
    ]
    assert navigations[-1]["context"]["blocked"]


@in_process
async def test_form_post_to_foreign_is_stopped(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/form")).ok
    result = await _click(browsers, task, "Send")
    await _denied_now_or_next(browsers, task, result)
    assert browsers.sites.log.requests == []
    assert (await _page_is_allowed(browsers, task)).endswith("/form")


@in_process
async def test_foreign_popup_is_closed_unloaded(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/popup")).ok
    result = await _click(browsers, task, "Open")
    await _denied_now_or_next(browsers, task, result)
    assert browsers.sites.log.requests == []
    session = browsers.pool.session(task.task_id)
    assert session is not None
    for _ in range(200):  # the popup is closed in the background
        if session.context.pages == [session.page]:
            break
        await asyncio.sleep(0.05)
    assert session.context.pages == [session.page]


@in_process
async def test_page_made_scheme_navigations_are_stopped(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    for label in ("Data link", "Blob", "Script link", "Secure"):
        await _back_on_an_allowed_page(browsers, task, "/schemes")
        before = len(await browsers.evidence(task, "origin_blocked"))
        await _click(browsers, task, label)
        # A loaded machine starts the click's navigation late: wait until it was stopped,
        # before going back would cancel it unseen.
        for _ in range(100):
            if len(await browsers.evidence(task, "origin_blocked")) > before:
                break
            await asyncio.sleep(0.05)
        await browsers.call(task, "browser.snapshot")
        await _page_is_allowed(browsers, task)
    assert browsers.sites.log.requests == []
    kinds = {r["data"]["kind"] for r in await browsers.evidence(task, "origin_blocked")}
    # The https link's refused tunnel left an error page: it was taken away.
    assert {"navigation_refused", "tunnel_refused", "navigation_blocked"} <= kinds


@in_process
async def test_a_download_is_kept_as_an_artifact_not_a_file_of_the_gateway(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/download")).ok
    result = await _click(browsers, task, "Get the file")
    assert result.ok, result  # type: ignore[attr-defined]
    for _ in range(100):
        if await browsers.evidence(task, "download_kept"):
            break
        await asyncio.sleep(0.05)
    assert await browsers.evidence(task, "download_kept")
    assert not list((browsers.gw.settings.data_dir).rglob("file.bin"))
    assert browsers.sites.log.requests == []


@in_process
async def test_chromiums_own_calls_home_are_not_the_tasks_evidence(
    browsers: BrowserGateway,
) -> None:
    # A form with a password field is what made Chromium's autofill call its server.
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/login")).ok
    await asyncio.sleep(3)
    assert (await browsers.call(task, "browser.snapshot")).ok
    targets = [r["data"]["target"] for r in await browsers.evidence(task, "origin_blocked")]
    assert not [t for t in targets if "google" in t], targets
    # A page's own navigation to such a host is still the task's, and still refused.
    nav = await browsers.call(task, "browser.navigate", url="https://clients2.google.com/x")
    assert nav.error is not None and nav.error.code == "origin_blocked"


def test_navigate_refuses_other_schemes_and_origins(
    gateway: GatewayHandle, gateway_task: TaskFactory
) -> None:
    allowed = gateway.host_origin
    task = gateway_task(scopes=["browser"], origins=[allowed])
    refused = [
        "javascript:alert(1)",
        "data:text/html,<h1>x</h1>",
        "blob:" + allowed + "/x",
        "file:///etc/passwd",
        allowed.replace("127.0.0.1", "localhost") + "/direct",
        "//" + allowed.split("//", 1)[1].replace("127.0.0.1", "localhost") + "/relative",
        allowed.replace("127.0.0.1", "2130706433"),
        allowed.replace("http://", "http://user@"),
    ]
    agent = McpAgent(gateway.loop, gateway.base_url, task)
    try:
        report = run_script(
            agent,
            [Step("browser.navigate", {"url": u}, "denied", "origin_blocked") for u in refused],
        )
    finally:
        agent.close()
    report.assert_ok()
    # No context was even needed to refuse them.
    assert gateway.control.task(task.task_id)["browser"] == {"state": "none"}
    assert len(Evidence(gateway.control, task.task_id).calls("browser.navigate")) == len(refused)
