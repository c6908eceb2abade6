"""The tab channel end to end: the shim in real Chromium pages, a real gateway, real sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import E2E
from gateway.core.results import Door, ToolStatus
from gateway.core.tokens import Purpose
from gateway.tabs import OpenView, PopulateDraft, ShowRunProgress, TabOutcome
from gateway.testing.agents import McpAgent
from gateway.testing.dashboard import DashboardPage
from gateway.testing.evidence import Evidence
from gateway.testing.script import Step, run_script

pytestmark = [pytest.mark.browser]
# The tests that hold an action open, race replies or forge frames in the channel core
# drive the gateway in process (`e2e`); the others are written on the pytest plugin's
# fixtures, as an app team writes its own (`dashboard_page`, `mcp_agent`, `evidence`).
in_process = pytest.mark.asyncio(loop_scope="session")

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "tabs"


async def connected(e2e: E2E, **task: Any) -> tuple[dict[str, Any], Any, Any]:
    """A task, its identity, and a page whose shim is connected as the task's tab."""
    body = await e2e.live.create_task(**task)
    identity = await e2e.live.gw.tasks.authenticate(body["tokens"]["tab"], Purpose.TAB)
    page = await e2e.page()
    await e2e.start(page, body["tokens"]["tab"], webmcp=False)
    return body, identity, page


def send(e2e: E2E, identity: Any, action: Any, timeout_s: float = 10) -> asyncio.Task[TabOutcome]:
    return asyncio.create_task(e2e.live.hub.send(identity, action, timeout_s=timeout_s))


@in_process
async def test_forged_reply_from_another_tasks_tab_is_rejected(e2e: E2E) -> None:
    a, identity_a, page_a = await connected(e2e, org="org_a", actor="alice")
    b, _identity_b, page_b = await connected(e2e, org="org_b", actor="bob")
    await page_a.evaluate("window.hold = true")
    pending = send(e2e, identity_a, ShowRunProgress(run_id="run_a"))
    [request] = await e2e.wait_event(page_a, "request")
    tab_a = await page_a.evaluate("window.session.tabId")
    # Tab B forges A's reply over its own, real websocket.
    await page_b.evaluate(
        """([id, task, tab]) => window.session._ws.send(JSON.stringify({type: "reply", id,
            task_id: task, tab_id: tab, revision: 1, ok: true, result: {shown: "forged"}}))""",
        [request["id"], a["task_id"], tab_a],
    )
    [error] = await e2e.wait_event(page_b, "error")
    assert error["code"] == "unknown_request"
    assert not pending.done()
    await page_a.evaluate("window.release()")
    outcome = await pending
    assert outcome.ok and outcome.result == {"shown": "run_a"}
    assert await page_a.text_content("#run") == "run_a"
    assert await page_b.text_content("#run") == ""
    rejected = await e2e.live.evidence(b["task_id"], "tab.frame_rejected", wait_for=1)
    assert [r["data"]["claimed_task_id"] for r in rejected] == [a["task_id"]]


@in_process
async def test_reply_at_a_stale_revision_is_rejected(e2e: E2E) -> None:
    task, identity, page = await connected(e2e)
    await page.evaluate("window.hold = true")
    pending = send(e2e, identity, ShowRunProgress(run_id="run_1"))
    [request] = await e2e.wait_event(page, "request")
    assert await page.evaluate("window.navigate('agent_builder', {agent_id: 'ag_1', tab: 2})") == 1
    tab_id = await page.evaluate("window.session.tabId")
    await page.evaluate(
        """([id, task, tab]) => window.session._ws.send(JSON.stringify({type: "reply", id,
            task_id: task, tab_id: tab, revision: 0, ok: true, result: {}}))""",
        [request["id"], task["task_id"], tab_id],
    )
    [error] = await e2e.wait_event(page, "error")
    assert error["code"] == "stale_revision"
    await page.evaluate("window.release()")
    assert (await pending).ok  # the real reply, at revision 1, completes it


@in_process
async def test_navigation_away_from_the_target_fails_stale_target(e2e: E2E) -> None:
    _task, identity, page = await connected(e2e)
    await page.evaluate("window.hold = true")
    action = PopulateDraft.model_validate({"agent_id": "ag_1", "fields": {"name": "New name"}})
    pending = send(e2e, identity, action)
    await e2e.wait_event(page, "request")
    await page.evaluate("window.navigate('agent_builder', {agent_id: 'ag_2'})")
    outcome = await pending
    assert outcome.error is not None and outcome.error.code == "stale_target"
    [cancel] = await e2e.wait_event(page, "cancel")
    assert cancel["reason"] == "stale_target"
    await page.evaluate("window.release()")
    assert await page.text_content("#draft-name") == ""


@in_process
async def test_foreign_origin_is_refused(e2e: E2E) -> None:
    body = await e2e.live.create_task()
    page = await e2e.page(origin=e2e.site.foreign)
    # The shim itself is not even importable there (no CORS grant for that origin)...
    message = await page.evaluate(
        "(o) => window.tryStart(o)", {"gateway": e2e.live.base_url, "token": body["tokens"]["tab"]}
    )
    assert "Failed to fetch dynamically imported module" in message
    # ...and a hand-written websocket from that origin is refused at the handshake.
    result = await page.evaluate(
        """([url, token]) => new Promise((resolve) => {
            const ws = new WebSocket(url);
            let opened = false;
            ws.onopen = () => { opened = true; ws.send(JSON.stringify({type: "hello", tab_id: "t",
                                                                      token})); };
            ws.onclose = (e) => resolve({opened, code: e.code});
        })""",
        [e2e.live.ws_url, body["tokens"]["tab"]],
    )
    assert result == {"opened": False, "code": 1006}
    assert await e2e.live.metric("gateway_tab_handshakes_refused_total", reason="origin") == 1
    assert e2e.live.hub.describe(body["task_id"])["connected"] is False


@in_process
async def test_expired_and_revoked_tokens_are_refused(e2e: E2E) -> None:
    body = await e2e.live.create_task()
    expired, _ = e2e.live.gw.tokens.mint(body["task_id"], Purpose.TAB, -1)
    page = await e2e.page()
    options = {"gateway": e2e.live.base_url, "token": expired}
    assert "1008" in await page.evaluate("(o) => window.tryStart(o)", options)
    await e2e.live.end_task(body["task_id"])
    options["token"] = body["tokens"]["tab"]
    assert "1008" in await page.evaluate("(o) => window.tryStart(o)", options)


@in_process
async def test_cancel_and_timeout_reach_the_page(e2e: E2E) -> None:
    _task, identity, page = await connected(e2e)
    await page.evaluate("window.hold = true")
    timed = send(e2e, identity, ShowRunProgress(run_id="run_t"), timeout_s=0.5)
    assert (await timed).status is ToolStatus.TIMEOUT
    cancelled = send(e2e, identity, ShowRunProgress(run_id="run_c"))
    await e2e.wait_event(page, "request", 2)
    cancelled.cancel()
    cancels = await e2e.wait_event(page, "cancel", 2)
    assert [c["reason"] for c in cancels] == ["timeout", "cancelled"]
    assert await page.text_content("#run") == ""


@in_process
async def test_dropped_tab_fails_pending_and_reconnects(e2e: E2E) -> None:
    _task, identity, page = await connected(e2e)
    await page.evaluate("window.hold = true")
    pending = send(e2e, identity, ShowRunProgress(run_id="run_1"))
    await e2e.wait_event(page, "request")
    await page.evaluate("window.session._ws.close(4000, 'dropped')")
    outcome = await pending
    assert outcome.status is ToolStatus.UNAVAILABLE
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.retryable) == ("tab_unavailable", True)
    await e2e.wait_event(page, "welcome")  # the shim came back under the same tab id
    await page.evaluate("window.hold = false")
    again = await e2e.live.hub.send(identity, ShowRunProgress(run_id="run_2"), timeout_s=10)
    assert again.ok
    assert await page.text_content("#run") == "run_2"


@in_process
async def test_a_busy_page_is_sent_only_what_it_can_answer_in_time(e2e: E2E) -> None:
    task, identity, page = await connected(e2e)
    hub = e2e.live.hub
    at_once, waiting = hub.config.actions_at_once, hub.config.actions_waiting
    # The page holds every action it gets: as many as it is sent at once are in its
    # hands, as many more wait their turn in the gateway.
    await page.evaluate("window.hold = true")
    runs = [f"run_{i}" for i in range(at_once + waiting)]
    pending = [send(e2e, identity, ShowRunProgress(run_id=run)) for run in runs]
    await e2e.wait_event(page, "request", at_once)
    for _ in range(500):
        if hub.describe(task["task_id"])["waiting_requests"] == waiting:
            break
        await asyncio.sleep(0.01)
    # One more is turned away at once, with a hint of when to come back.
    refused = await hub.send(identity, ShowRunProgress(run_id="run_refused"), timeout_s=10)
    assert refused.status is ToolStatus.UNAVAILABLE
    assert refused.error is not None and refused.error.code == "overloaded"
    assert refused.error.retryable
    assert refused.error.details is not None and refused.error.details["retry_after_s"] >= 1
    assert not any(p.done() for p in pending)
    assert len(await e2e.events(page, "request")) == at_once
    # Once the page lets go, every admitted action is applied and answered.
    await page.evaluate("window.release()")
    outcomes = await asyncio.gather(*pending)
    assert [o.result for o in outcomes] == [{"shown": run} for run in runs]
    requests = await e2e.events(page, "request")
    assert sorted(r["args"]["run_id"] for r in requests) == sorted(runs)
    assert await e2e.live.metric("gateway_calls_shed_total", resource="tab") == 1


@in_process
async def test_the_page_refuses_an_action_outside_the_allowlist(e2e: E2E) -> None:
    task, _identity, page = await connected(e2e)
    # Straight into the channel core, past the gateway's own validation: the shim must
    # still refuse it before any handler runs.
    hub = e2e.live.hub
    channel = hub._channels[task["task_id"]]
    forged = OpenView.model_construct(view="run_report", params={"run_id": "javascript:alert(1)"})
    request_id = "req_forged"
    loop = asyncio.get_running_loop()
    future: asyncio.Future[TabOutcome] = loop.create_future()
    hub._waiting[request_id] = future
    hub._apply(
        channel, channel.request(request_id, forged, now=loop.time() * 0 + 1e12, timeout_s=10)
    )
    outcome = await asyncio.wait_for(future, 10)
    assert outcome.error is not None and outcome.error.code == "invalid_input"
    [refused] = await e2e.wait_event(page, "refused")
    assert "not allowed" in refused["reason"]
    assert await page.text_content("#view") == "home"


def test_every_ui_action_is_applied_as_text(
    dashboard_page: DashboardPage, mcp_agent: McpAgent
) -> None:
    diff = '- old()\n+ <img src=x onerror="window.pwned=1"> new()\n'
    fields = {
        "name": "Support bot",
        "instructions": "Be <b>kind</b>.",
        "model": "gpt-4.1",
        "tools": ["ui.read_view", "demo.echo"],
    }
    report = run_script(
        mcp_agent,
        [
            Step("ui.open_view", {"view": "run_report", "params": {"run_id": "run_7"}}),
            Step("ui.populate_draft", {"fields": fields}),
            Step("ui.show_run_progress", {"run_id": "run_7"}, expect={"shown": "run_7"}),
            Step(
                "ui.display_proposed_change",
                {"title": "Tighten <em>tone</em>", "summary": "Shorter.", "diff": diff},
            ),
            Step(
                "ui.read_view",
                expect={"view": "run_report", "params": {"run_id": "run_7"}, "revision": 1},
            ),
        ],
    )
    report.assert_ok()
    page = dashboard_page.page
    assert [entry["type"] for entry in dashboard_page.log] == [
        "open_view",
        "populate_draft",
        "show_run_progress",
        "display_proposed_change",
        "read_view",
    ]
    shown = page.locator("#gateway-log").inner_text()
    assert "Be <b>kind</b>." in shown and "<img src=x" in shown
    assert page.text_content("#gateway-view") == "run_report"
    assert page.evaluate("document.querySelectorAll('img, em, b').length") == 0
    assert page.evaluate("window.pwned") is None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "display_proposed_change.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 1000


def test_second_tab_supersedes_the_first(
    dashboard_page: DashboardPage, new_context: Any, mcp_agent: McpAgent
) -> None:
    first = dashboard_page.page
    second = DashboardPage(
        new_context().new_page(),
        dashboard_page.control,
        dashboard_page.task,
        dashboard_page.host_origin,
    ).open()
    first.wait_for_selector('#gateway-state[data-state="disconnected"]')
    assert mcp_agent.call("ui.show_run_progress", {"run_id": "run_2"})["status"] == "succeeded"
    second.wait_for_action("show_run_progress")
    assert dashboard_page.log == []
    assert dashboard_page.tab()["connected"]


def test_token_in_the_url_is_ignored(dashboard_page: DashboardPage, gateway_task: Any) -> None:
    other = gateway_task(actor="url_user")
    ws_url = dashboard_page.control.base_url.replace("http://", "ws://") + "/v1/tabs"
    result = dashboard_page.page.evaluate(
        """([url, token]) => new Promise((resolve) => {
            const ws = new WebSocket(url + "?token=" + encodeURIComponent(token));
            const frames = [];
            ws.onopen = () => ws.send(JSON.stringify({type: "hello", tab_id: "t1", token: "-"}));
            ws.onmessage = (e) => frames.push(JSON.parse(e.data));
            ws.onclose = (e) => resolve({code: e.code, frames});
        })""",
        [ws_url, other.tab_token],
    )
    assert result["code"] == 1008
    assert [f["type"] for f in result["frames"]] == ["error"]
    assert result["frames"][0]["code"] == "invalid_token"
    assert dashboard_page.control.task(other.task_id)["tab"]["connected"] is False


@pytest.mark.gateway_task(scopes=["ui", "demo"], actor="carol")
def test_page_calls_tools_under_the_tabs_identity(
    dashboard_page: DashboardPage, evidence: Evidence
) -> None:
    page = dashboard_page.page
    result = page.evaluate("window.gatewaySession.call('demo.echo', {text: 'hi'})")
    assert result["status"] == "succeeded"
    assert result["output"] == {"text": "hi", "actor": "carol", "task": evidence.task_id}
    read = page.evaluate("window.gatewaySession.call('ui.read_view', {})")
    assert read["output"]["view"] == "home"
    evidence.assert_called("demo.echo", door=Door.TAB.value)
    evidence.assert_called("ui.read_view", door=Door.TAB.value)
