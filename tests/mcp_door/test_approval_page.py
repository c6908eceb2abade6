"""A need only the control plane's party may answer, asked of an MCP client that declared
URL-mode elicitation: the client gets a link to the gateway's own approval page (the
console's), never a form. From the attacker's side: the client's reply answers nothing, a
task token and another organization's member get nothing from the page; then a person
answers there in Chromium, once the card is still and in view, and the call resumes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import mcp_types as types
import pytest
from starlette.requests import Request

from gateway import console, mcp_door
from gateway.browser.chromium import find_chromium, launch_args
from gateway.console import HostSignIn, Viewer, host_viewer
from gateway.core.approvals.broker import Decision
from gateway.core.tokens import Purpose
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.mcp_door.conftest import DoorLive, ToolsSeen, register_test_tools

# Beyond the grant, and only the control plane may allow it.
CONTROL_ONLY = {
    "grantable": [{"scope": "secret", "by": "control"}],
    "channels": ["elicitation", "control"],
    "timeout_s": 60,
}
# Where the gateway says it is reached (`GATEWAY_PUBLIC_URL`): links name this host.
PUBLIC_URL = "http://gateway.test:8443"
PEOPLE = {
    "a-member": host_viewer("al", "member", {"org_a"}),
    "b-member": host_viewer("bea", "member", {"org_b"}),
}


async def people(request: Request) -> Viewer | None:
    return PEOPLE.get(request.cookies.get("host", ""))


@pytest.fixture
async def door(settings: Settings, live_factory: Callable[..., Any]) -> AsyncIterator[DoorLive]:
    probe = ToolsSeen()

    def setup(gw: Gateway) -> None:
        register_test_tools(gw, probe)
        gw.services.provide(HostSignIn, HostSignIn(people))

    async with live_factory(
        settings.model_copy(update={"public_url": PUBLIC_URL}),
        setup=setup,
        extensions=[health.routes, tasks.routes, mcp_door.install, console.install],
    ) as live:
        yield DoorLive(live, probe)


def linking(seen: list[Any], linked: asyncio.Event) -> Any:
    """The attacker's callback: it 'accepts' the link and sends an approval with it."""

    async def callback(_ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params)
        linked.set()
        return types.ElicitResult(action="accept", content={"decision": "approve once"})

    return callback


async def deny(door: DoorLive, task: dict[str, Any], approval_id: str) -> None:
    ident = await door.live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    await door.live.gateway.approvals.decide(
        ident, approval_id, Decision("deny", "call", "root", "admin")
    )


async def _pending(door: DoorLive, task_id: str) -> Any:
    for _ in range(500):
        found = door.live.gateway.approvals.pending(task_id)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("nothing was asked")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_client_gets_a_link_to_the_gateways_page_and_its_reply_answers_nothing(
    door: DoorLive, mode: str
) -> None:
    task = await door.live.create_task(scopes=["ui"], approvals=CONTROL_ONLY)
    seen: list[Any] = []
    linked = asyncio.Event()
    gw = door.live.gateway
    async with door.client(
        task["tokens"]["agent"], mode=mode, elicitation_callback=linking(seen, linked)
    ) as client:
        call = asyncio.ensure_future(client.call_tool("test_secret", {}))
        pending = await _pending(door, task["task_id"])
        await asyncio.wait_for(linked.wait(), 10)
        [asked] = seen
        assert asked.mode == "url"  # a link, never a form the client could fill
        url = urlsplit(asked.url)
        assert f"{url.scheme}://{url.netloc}" == PUBLIC_URL  # the gateway's own host
        assert url.path == f"/console/approvals/{pending.id}"
        assert "control plane" in asked.message
        await asyncio.sleep(0.3)  # the reply was handled: still nobody decided
        assert gw.approvals.find(pending.id) is not None
        assert not call.done()
        # Only the control plane's party decides: here it refuses, and the call ends so.
        await deny(door, task, pending.id)
        result = await asyncio.wait_for(call, 30)
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "approval_denied"
    decided = [r for r in await door.evidence(task["task_id"]) if r["kind"] == "approval.decided"]
    assert [d["data"]["channel"] for d in decided] == ["control"]


async def test_the_page_refuses_task_tokens_and_another_organizations_member(
    door: DoorLive,
) -> None:
    live = door.live
    task = await live.create_task(scopes=["ui"], approvals=CONTROL_ONLY)
    async with door.client(
        task["tokens"]["agent"], mode="legacy", elicitation_callback=linking([], asyncio.Event())
    ) as client:
        call = asyncio.ensure_future(client.call_tool("test_secret", {}))
        pending = await _pending(door, task["task_id"])
        page = f"/console/approvals/{pending.id}"
        answer = f"/console/api/tasks/{task['task_id']}/approvals/{pending.id}"
        async with (
            httpx.AsyncClient(base_url=live.base_url) as http,
            httpx.AsyncClient(base_url=live.base_url, cookies={"host": "b-member"}) as bea,
            httpx.AsyncClient(base_url=live.base_url, cookies={"host": "a-member"}) as al,
        ):
            for purpose in ("agent", "tab", "bridge"):
                bearer = {"authorization": f"Bearer {task['tokens'][purpose]}"}
                shown = await http.get(page, headers=bearer)
                assert shown.status_code == 303, (purpose, shown.status_code)
                assert shown.headers["location"].endswith("/console/sign-in")
                assert pending.id not in shown.text
                sent = await http.post(answer, headers=bearer, json={"decision": "approve"})
                assert sent.status_code == 401, (purpose, sent.text)
            theirs = await bea.get(page)
            assert theirs.status_code == 404
            assert "test.secret" not in theirs.text
            unknown = await al.get("/console/approvals/apr_nothing")
            assert unknown.status_code == 404
            ours = await al.get(page)
            assert ours.status_code == 200
            assert f'data-approval-id="{pending.id}"' in ours.text
            assert '<fieldset class="answer" disabled>' in ours.text  # armed by the page only
        assert live.gateway.approvals.find(pending.id) is not None
        await deny(door, task, pending.id)
        await asyncio.wait_for(call, 30)


async def test_a_person_answers_on_the_page_and_the_call_resumes(door: DoorLive) -> None:
    from playwright.async_api import async_playwright, expect

    live = door.live
    task = await live.create_task(scopes=["ui"], approvals=CONTROL_ONLY)
    seen: list[Any] = []
    linked = asyncio.Event()
    async with (
        async_playwright() as pw,
        door.client(
            task["tokens"]["agent"], mode="auto", elicitation_callback=linking(seen, linked)
        ) as client,
    ):
        browser = await pw.chromium.launch(executable_path=find_chromium(), args=launch_args())
        try:
            call = asyncio.ensure_future(client.call_tool("test_secret", {}))
            await asyncio.wait_for(linked.wait(), 10)
            view = await (await browser.new_context()).new_page()
            # This test's gateway is served on loopback, the same gateway under another name.
            link = live.base_url + urlsplit(seen[0].url).path
            await view.goto(link)
            # Not signed in: the console's sign-in first, then the page the link names.
            assert view.url.endswith("/console/sign-in")
            await view.fill("#key", live.gateway.settings.control_key or "")
            await view.click('button[type="submit"]')
            await view.goto(link)
            card = view.locator('.approval[data-state="pending"]')
            await card.wait_for()
            assert "test.secret" in (await card.text_content() or "")
            approve = card.locator("button.approve")
            await expect(approve).to_be_enabled(timeout=10_000)
            # Moved, it takes no answer until it has been still again.
            await view.evaluate("document.querySelector('h1').style.marginBottom = '60px'")
            await expect(approve).to_be_disabled(timeout=2_000)
            await expect(approve).to_be_enabled(timeout=10_000)
            answered = await card.element_handle()
            await approve.click(no_wait_after=True)
            result = await asyncio.wait_for(call, 30)
            assert not result.is_error, result
            assert result.structured_content is not None
            assert result.structured_content["status"] == "succeeded"
            await view.wait_for_function("el => el.dataset.state === 'approved'", arg=answered)
            # One answer counts: a second, from the same page, is the contract's conflict.
            csrf = await view.get_attribute('meta[name="console-csrf"]', "content")
            approval_id = await view.get_attribute(".approval", "data-approval-id")
            second = await view.request.post(
                f"{live.base_url}/console/api/tasks/{task['task_id']}/approvals/{approval_id}",
                data=json.dumps({"decision": "deny"}),
                headers={"content-type": "application/json", "x-console-csrf": csrf or ""},
            )
            assert second.status == 409
        finally:
            await browser.close()
    [approval] = await live.gateway.approvals.listing(task["task_id"])
    assert approval["decision"]["channel"] == "control"
    assert approval["decision"]["approver"]["id"] == "control-plane"
