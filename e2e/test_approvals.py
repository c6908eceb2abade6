"""Approval in the tab, end to end: real Chromium, the shim's own element, a real gateway.

A person answers with a real key press on the shim's element; a script's click, a forged
frame, the tab of a call's own WebMCP door and a `by: "control"` approval cannot answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.conftest import E2E
from gateway.identity import TaskIdentity
from gateway.results import Door, ToolResult
from gateway.tokens import Purpose

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# What a hostile page script can do before the shim loads: keep every shadow root, closed
# or not, to reach into the approval element.
CAPTURE_ROOTS = """
window.__roots = [];
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  const root = attach.call(this, init);
  window.__roots.push(root);
  return root;
};
"""
GRANTABLE = {"grantable": [{"tool": "demo.admin_only"}]}
BY_CONTROL = {"grantable": [{"tool": "demo.admin_only", "by": "control"}]}
HOST = "[data-gateway-approval]"


async def open_tab(e2e: E2E, approvals: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    body = await e2e.live.create_task(role="member", scopes=["demo"], approvals=approvals)
    identity = await e2e.live.gw.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
    context = await e2e.browser.new_context()
    e2e._contexts.append(context)
    await context.add_init_script(CAPTURE_ROOTS)
    page = await context.new_page()
    await page.goto(e2e.site.origin + "/")
    await page.wait_for_function("typeof window.start === 'function'")
    await e2e.start(page, body["tokens"]["tab"], webmcp=False)
    return body, identity, page


def agent_call(e2e: E2E, identity: TaskIdentity, text: str) -> asyncio.Task[ToolResult]:
    """The agent calls the tool through MCP, as a client would."""
    return asyncio.ensure_future(
        e2e.live.gw.pipeline.call(
            identity, "demo.admin_only", {"text": text}, door=Door.MCP, cancel=asyncio.Event()
        )
    )


async def press(page: Any, *keys: str) -> None:
    """A person's key presses on the approval element: focus lands on its first button
    (Deny); Tab moves on (Approve once, then Approve for this task)."""
    await page.focus(HOST)
    for key in keys:
        await page.keyboard.press(key)


async def panel_text(page: Any) -> str:
    text: str = await page.evaluate("() => window.__roots.map((r) => r.textContent).join(' | ')")
    return text


async def approvals(e2e: E2E, task_id: str) -> list[dict[str, Any]]:
    response = await e2e.live.http.get(f"/v1/tasks/{task_id}/approvals", headers=e2e.live.control)
    found: list[dict[str, Any]] = response.json()["approvals"]
    return found


async def test_the_user_approves_with_a_real_key_press(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "ship it")
    [shown] = await e2e.wait_event(page, "approval")
    assert shown["tool"] == "demo.admin_only"
    assert shown["answerable"] is True
    assert "nonce" not in shown  # the page's event never carries it
    assert "ship it" in await panel_text(page)
    await press(page, "Tab", "Enter")
    result = await call
    assert result.ok, result
    assert result.output == {"ok": "ship it"}
    [closed] = await e2e.wait_event(page, "approval_closed")
    assert closed["status"] == "approved"
    assert await page.locator(HOST).count() == 0
    [stored] = await approvals(e2e, task["task_id"])
    assert stored["status"] == "approved"
    assert stored["decision"]["channel"] == "tab"
    assert stored["decision"]["approver"] == {"id": "user_1", "role": "member"}


async def test_the_user_denies_and_the_tool_never_runs(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "no")
    await e2e.wait_event(page, "approval")
    await press(page, "Enter")
    result = await call
    assert result.error is not None
    assert (result.status.value, result.error.code) == ("denied", "approval_denied")
    [record] = await e2e.live.evidence(task["task_id"], "call")
    assert record["output"] is None


async def test_a_script_click_is_not_a_persons_answer(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "scripted")
    await e2e.wait_event(page, "approval")
    await page.evaluate(
        """() => window.__roots.at(-1).querySelector("[part~='approve']").click()"""
    )
    [refused] = await e2e.wait_event(page, "approval_refused")
    assert refused["reason"] == "untrusted_event"
    await asyncio.sleep(0.2)
    assert not call.done()
    assert [a["status"] for a in await approvals(e2e, task["task_id"])] == ["pending"]
    await press(page, "Tab", "Enter")  # the person, for real
    assert (await call).ok


async def test_a_forged_answer_frame_is_refused_and_recorded(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "forged")
    [shown] = await e2e.wait_event(page, "approval")
    await page.evaluate(
        """([id, task, rev]) => window.session._ws.send(JSON.stringify({type: "approval", id,
            task_id: task, tab_id: window.session.tabId, revision: rev, nonce: "guessed",
            decision: "approve", scope: "task"}))""",
        [shown["id"], task["task_id"], shown["revision"]],
    )
    [error] = await e2e.wait_event(page, "error")
    assert error["id"] == shown["id"]
    [refusal] = await e2e.live.evidence(task["task_id"], "tab.approval_refused", wait_for=1)
    assert refusal["data"]["code"] == "forbidden"
    assert not call.done()
    await press(page, "Enter")
    assert not (await call).ok
    assert await e2e.live.gw.approvals.grants(task["task_id"]) == {}


async def test_a_tab_that_reconnects_in_the_middle_still_gets_the_request(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "across a reconnect")
    await e2e.wait_event(page, "approval")
    await page.evaluate("window.session._ws.close(4000, 'dropped')")
    await e2e.wait_event(page, "welcome")  # the reconnect's (listeners came after the first)
    shown = await e2e.wait_event(page, "approval", 2)
    assert shown[0]["id"] == shown[1]["id"]
    assert await page.locator(HOST).count() == 1
    await press(page, "Tab", "Tab", "Enter")  # approve for this task
    assert (await call).ok
    grants = await e2e.live.gw.approvals.grants(task["task_id"])
    assert "demo.admin_only" in grants


async def test_a_control_approval_shows_as_waiting_and_the_control_plane_decides(
    e2e: E2E,
) -> None:
    task, identity, page = await open_tab(e2e, BY_CONTROL)
    call = agent_call(e2e, identity, "needs an admin")
    [shown] = await e2e.wait_event(page, "approval")
    assert shown["answerable"] is False
    assert "Waiting for someone else" in await panel_text(page)
    buttons = await page.evaluate("() => window.__roots.at(-1).querySelectorAll('button').length")
    assert buttons == 0
    url = f"/v1/tasks/{task['task_id']}/approvals/{shown['id']}"
    decision = {"decision": "approve", "approver": {"id": "admin_9", "role": "admin"}}
    answer = await e2e.live.http.post(url, json=decision, headers=e2e.live.control)
    assert answer.status_code == 200
    assert (await call).ok
    [closed] = await e2e.wait_event(page, "approval_closed")
    assert closed["status"] == "approved"


async def test_a_call_from_the_tabs_own_webmcp_is_not_approved_in_that_tab(e2e: E2E) -> None:
    task, _identity, page = await open_tab(e2e, GRANTABLE)
    result_js = page.evaluate(
        """() => window.session.call("demo_admin_only", {text: "from webmcp"}, {via: "webmcp"})"""
    )
    result = asyncio.ensure_future(result_js)
    [shown] = await e2e.wait_event(page, "approval")
    assert shown["answerable"] is False
    # The page's agent could press anything here: there is nothing to press.
    buttons = await page.evaluate("() => window.__roots.at(-1).querySelectorAll('button').length")
    assert buttons == 0
    [pending] = await approvals(e2e, task["task_id"])
    assert pending["door"] == "webmcp"
    url = f"/v1/tasks/{task['task_id']}/approvals/{shown['id']}"
    decision = {"decision": "deny", "approver": {"id": "admin_9", "role": "admin"}}
    assert (await e2e.live.http.post(url, json=decision, headers=e2e.live.control)).is_success
    answered = await result
    assert answered["status"] == "denied"
    assert answered["error"]["code"] == "approval_denied"
