"""Approval in the tab, end to end: real Chromium, the shim's own element, a real gateway.

A person answers with a real key press or click on the shim's element; a script's click, a
forged frame, the tab of a call's own WebMCP door and a `by: "control"` approval cannot
answer. A panel takes no answer until it has held still in view, never moves once placed,
and never lands on another: a click aimed at one request never answers another.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.conftest import E2E
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ToolResult
from gateway.core.tokens import Purpose

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


async def ready(page: Any, approval_id: str | None = None) -> None:
    """Wait until the panel takes answers (it has held still in view long enough)."""
    name = f'[data-gateway-approval="{approval_id}"]' if approval_id else HOST
    await page.wait_for_selector(f"{name}[data-ready]", state="attached", timeout=10_000)


async def press(page: Any, *keys: str) -> None:
    """A person's key presses on the approval element: focus lands on its first button
    (Deny); Tab moves on (Approve once, then Approve for this task)."""
    await ready(page)
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
    await ready(page)
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


# -- the panel under the pointer --------------------------------------------------------

BOX = """([id, part]) => {
  const root = window.__roots.find((r) => r.host.getAttribute("data-gateway-approval") === id);
  const node = root.querySelector(`[part~='${part || "panel"}']`);
  const r = node.getBoundingClientRect();
  return {x: r.x, y: r.y, width: r.width, height: r.height};
}"""


async def box(page: Any, approval_id: str, part: str | None = None) -> dict[str, float]:
    found: dict[str, float] = await page.evaluate(BOX, [approval_id, part])
    return found


def centre(b: dict[str, float]) -> tuple[float, float]:
    return b["x"] + b["width"] / 2, b["y"] + b["height"] / 2


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


async def status_of(e2e: E2E, task_id: str) -> dict[str, str]:
    return {a["approval_id"]: a["status"] for a in await approvals(e2e, task_id)}


async def test_a_panel_that_appears_under_the_pointer_takes_no_click(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    aimed = agent_call(e2e, identity, "the one aimed at")
    [first] = await e2e.wait_event(page, "approval")
    await ready(page, first["id"])
    x, y = centre(await box(page, first["id"], "approve"))
    await page.mouse.move(x, y)
    # The pointer rests on "Approve once" of the first request; a second one arrives.
    other = agent_call(e2e, identity, "the one that slid in")
    second = (await e2e.wait_event(page, "approval", 2))[1]
    await page.mouse.click(x, y)
    assert (await aimed).ok, "the click did not answer the request it was aimed at"
    await asyncio.sleep(0.3)
    assert not other.done()
    assert (await status_of(e2e, task["task_id"]))[second["id"]] == "pending"
    assert not overlap(await box(page, second["id"]), {"x": x, "y": y, "width": 1, "height": 1})
    await e2e.live.end_task(task["task_id"])
    await other


async def test_a_new_panel_takes_no_answer_until_it_has_held_still(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "too soon")
    [shown] = await e2e.wait_event(page, "approval")
    x, y = centre(await box(page, shown["id"], "approve"))
    # A click the moment it appears, the way a click meant for the page lands on it.
    await page.mouse.click(x, y)
    await asyncio.sleep(0.3)
    assert not call.done()
    assert (await status_of(e2e, task["task_id"]))[shown["id"]] == "pending"
    await ready(page, shown["id"])
    await page.mouse.click(x, y)
    assert (await call).ok


async def test_panels_never_move_and_never_cover_one_another(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    await page.set_viewport_size({"width": 1280, "height": 1000})  # room for three
    calls = [agent_call(e2e, identity, f"request {n}") for n in range(3)]
    shown = await e2e.wait_event(page, "approval", 3)
    ids = [s["id"] for s in shown]
    for approval_id in ids:
        await ready(page, approval_id)
    boxes = [await box(page, approval_id) for approval_id in ids]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not overlap(a, b), (a, b)
    # The middle one is answered and goes: the others stay exactly where they were.
    middle = shown[1]
    await page.mouse.click(*centre(await box(page, middle["id"], "deny")))
    await e2e.wait_event(page, "approval_closed")
    assert [await box(page, ids[0]), await box(page, ids[2])] == [boxes[0], boxes[2]]
    late = agent_call(e2e, identity, "a late one")
    fourth = (await e2e.wait_event(page, "approval", 4))[3]
    placed = await box(page, fourth["id"])
    assert not overlap(placed, boxes[0]) and not overlap(placed, boxes[2])
    assert [await box(page, ids[0]), await box(page, ids[2])] == [boxes[0], boxes[2]]
    await e2e.live.end_task(task["task_id"])
    await asyncio.gather(*calls, late)


COVER = """() => {
  const cover = document.createElement("div");
  cover.textContent = "Click the blue button to continue";
  cover.style.cssText = "position:fixed;inset:0;z-index:2147483647;background:#fff;" +
    "pointer-events:none";
  document.body.append(cover);
}"""


async def test_a_covered_panel_cannot_be_approved(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    call = agent_call(e2e, identity, "behind a cover")
    [shown] = await e2e.wait_event(page, "approval")
    await page.evaluate(COVER)
    x, y = centre(await box(page, shown["id"], "approve"))
    # The person sees only the cover's text; clicks pass through it to the panel.
    await asyncio.sleep(1.5)
    await page.mouse.click(x, y)
    await asyncio.sleep(0.3)
    assert not call.done()
    assert (await status_of(e2e, task["task_id"]))[shown["id"]] == "pending"
    assert await page.locator(f"{HOST}[data-ready]").count() == 0
    await e2e.live.end_task(task["task_id"])
    await call


async def test_a_panel_with_no_room_waits_unseen_until_a_slot_frees(e2e: E2E) -> None:
    task, identity, page = await open_tab(e2e, GRANTABLE)
    await page.set_viewport_size({"width": 900, "height": 420})  # room for one
    first_call = agent_call(e2e, identity, "the first")
    [first] = await e2e.wait_event(page, "approval")
    await ready(page, first["id"])
    second_call = agent_call(e2e, identity, "the second")
    second = (await e2e.wait_event(page, "approval", 2))[1]
    await asyncio.sleep(1.5)
    # Drawn nowhere: not over the first, and it takes nothing.
    assert await page.locator(f'[data-gateway-approval="{second["id"]}"][data-ready]').count() == 0
    await page.mouse.click(*centre(await box(page, first["id"], "deny")))
    assert not (await first_call).ok
    await ready(page, second["id"])
    await page.mouse.click(*centre(await box(page, second["id"], "approve")))
    assert (await second_call).ok
    assert [a["status"] for a in await approvals(e2e, task["task_id"])] == ["denied", "approved"]
