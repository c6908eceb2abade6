"""The operator console in real Chromium, as a person uses it: the first workflow runs, the
console shows its timeline in order with the task browser's screenshots, an approval is
answered from the console, the trace opens in Playwright's viewer served by the gateway
and shows the agent's clicks, and the export holds it all. A task token, a missing or
wrong key and a member of another organization are refused.

With `CONSOLE_SCREENSHOTS=<dir>` set, the pages are also saved there as pictures (the
ones in docs/img/ were made so)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from examples.synthetic_app.serve import ExampleStack, running_stack
from examples.synthetic_app.store import who
from examples.synthetic_app.workflow import mcp_door, open_assistant, run_workflow, sign_in
from gateway.console import HostSignIn, Viewer, host_viewer
from gateway.core.results import Door as GatewayDoor
from gateway.core.tokens import Purpose
from gateway.serving import serving
from gateway.testing import task_body, test_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

PRODUCT_TOOLS = [
    "dashboard.read_view",
    "agents.prepare_draft",
    "agents.save_draft",
    "evals.start_run",
    "evals.read_progress",
    "evals.open_report",
]
# People the host signs in, by the value of its own cookie.
HOST_PEOPLE = {
    "globex-gus": host_viewer("gus", "admin", {"org_globex"}),
    "acme-ada": host_viewer("ada", "admin", {"org_acme"}),
}
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
ADA = who("org_acme", "ada")


async def host_check(request: Request) -> Viewer | None:
    return HOST_PEOPLE.get(request.cookies.get("host_session", ""))


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    settings = test_settings(
        tmp_path / "data", example=True, browser_trace=True, browser_screenshots=True
    )
    async with running_stack(settings, step_s=0.05) as stack:
        stack.gateway.services.provide(HostSignIn, HostSignIn(host_check))
        yield stack


async def shot(page: Any, name: str, element: Any = None) -> None:
    if SHOTS:
        # Playwright makes the folder.
        path = str(Path(SHOTS) / f"console-{name}.png")
        if element is not None:
            await element.screenshot(path=path)
        else:
            await page.screenshot(path=path)


async def other_tasks(stack: ExampleStack) -> dict[str, str]:
    """Two more tasks beside the workflow's: one of Acme that ended after a refused call,
    one of Globex still live."""
    made = {}
    async with httpx.AsyncClient(base_url=stack.gateway_url) as http:
        control = {"authorization": f"Bearer {stack.gateway.settings.control_key}"}
        for name, org, actor in (("ended", "org_acme", "max"), ("globex", "org_globex", "gus")):
            body = task_body(org=org, actor=actor, role="member", scopes=["ui"])
            created = await http.post("/v1/tasks", json=body, headers=control)
            assert created.status_code == 201, created.text
            made[name] = created.json()["task_id"]
            identity = await stack.gateway.tasks.authenticate(
                created.json()["tokens"]["agent"], Purpose.AGENT
            )
            refused = await stack.gateway.pipeline.call(
                identity, "agents.save_draft", {"agent_id": "agt_x"}, door=GatewayDoor.MCP
            )
            assert refused.status == "denied"
        await stack.gateway.tasks.end(made["ended"])
    return made


def foreign_trace_site(data: bytes) -> Starlette:
    """Another origin serving a trace to anyone who asks (CORS open)."""

    async def trace(_request: Request) -> Response:
        return Response(
            data, media_type="application/zip", headers={"Access-Control-Allow-Origin": "*"}
        )

    return Starlette(routes=[Route("/trace.zip", trace, methods=["GET"])])


async def listed(page: Any) -> list[str]:
    ids: list[str] = await page.eval_on_selector_all(
        '[data-testid="tasks"] tbody tr', "rows => rows.map(r => r.dataset.taskId)"
    )
    return ids


def ref_of(snapshot: str, text: str) -> str:
    for line in snapshot.splitlines():
        if text in line:
            found = re.search(r"\[ref=([^\]]+)\]", line)
            if found:
                return found.group(1)
    raise AssertionError(f"no element with {text!r} in the snapshot:\n{snapshot}")


async def console_sign_in(browser: Any, stack: ExampleStack) -> tuple[Any, Any]:
    context = await browser.new_context(viewport={"width": 1360, "height": 900})
    page = await context.new_page()
    await page.goto(f"{stack.gateway_url}/console")
    # Not signed in: the sign-in page, which a wrong key does not get past.
    assert page.url.endswith("/console/sign-in")
    await page.fill("#key", "not-the-key")
    await page.click('button[type="submit"]')
    assert "not the control key" in (await page.text_content("main") or "")
    await page.fill("#key", stack.gateway.settings.control_key or "")
    await page.click('button[type="submit"]')
    await page.wait_for_selector('[data-testid="tasks"]')
    return context, page


async def wait_for_trace(stack: ExampleStack, org_id: str, task_id: str) -> dict[str, Any]:
    for _ in range(400):
        records = await stack.gateway.store.evidence_for(org_id, task_id, limit=5000)
        for record in records:
            if record.get("kind") == "browser_closed" and "trace" in record.get("data", {}):
                trace: dict[str, Any] = record["data"]["trace"]
                return trace
        await asyncio.sleep(0.05)
    raise AssertionError("the task browser's trace was not kept")


async def test_a_person_follows_a_task_in_the_console(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    dashboard = await dashboard_browser.new_context(viewport={"width": 1360, "height": 860})
    page = await dashboard.new_page()
    console, view = await console_sign_in(dashboard_browser, example)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        token = await open_assistant(page, example, "ada")
        identity = await example.gateway.tasks.authenticate(token, Purpose.AGENT)
        task_id = identity.task_id
        async with mcp_door(example.gateway_url, token) as door:
            steps = await run_workflow(example, page, door, user="ada")
            assert [s.ok for s in steps] == [True] * 6, [s.observable for s in steps]
            # The agent also drives the task browser: into the sandbox, a click, a picture.
            opened = await door.call(
                "browser.navigate", {"url": f"{identity.sandbox.app_origin}/signin"}
            )
            assert opened["status"] == "succeeded", opened
            snapshot = (await door.call("browser.snapshot", {}))["output"]["snapshot"]
            clicked = await door.call("browser.click", {"ref": ref_of(snapshot, "Ada")})
            assert clicked["status"] == "succeeded", clicked
            pictured = await door.call("browser.screenshot", {})
            assert pictured["status"] == "succeeded", pictured

            # The list: every task, narrowed by organization, actor, status and door.
            more = await other_tasks(example)
            await view.goto(f"{example.gateway_url}/console")
            assert set(await listed(view)) >= {task_id, *more.values()}
            await shot(view, "tasks")
            await view.fill("#f-org", "org_acme")
            await view.click('[data-testid="filters"] button')
            await view.wait_for_url("**org=org_acme**")
            assert more["globex"] not in await listed(view)
            await view.select_option("#f-status", "ended")
            await view.click('[data-testid="filters"] button')
            await view.wait_for_url("**status=ended**")
            assert await listed(view) == [more["ended"]]
            ended_row = view.locator(f'tr[data-task-id="{more["ended"]}"]')
            assert await ended_row.locator('[data-count="refused"]').text_content() == "1"
            await view.goto(f"{example.gateway_url}/console?actor=ada&door=mcp")
            assert await listed(view) == [task_id]

            # Its counts follow the calls, live.
            row = view.locator(f'tr[data-task-id="{task_id}"]')
            await row.wait_for()
            calls = row.locator('[data-count="calls"]')
            before = int(await calls.text_content() or "0")
            assert before >= 10
            again = await door.call("dashboard.read_view", {})
            assert again["status"] == "succeeded"
            await view.wait_for_function(
                "([el, n]) => Number(el.textContent) > n",
                arg=[await calls.element_handle(), before],
            )

            # The task's timeline: the six operations in order, each with its door.
            await row.locator("a").click()
            await view.wait_for_selector('[data-testid="timeline"]')
            tools = await view.eval_on_selector_all(
                '[data-testid="timeline"] li[data-category="call"]',
                "items => items.map(i => i.dataset.tool)",
            )
            first = [t for t in tools if t in PRODUCT_TOOLS]
            deduped = [t for i, t in enumerate(first) if i == 0 or first[i - 1] != t]
            assert deduped[:6] == PRODUCT_TOOLS
            # The UI actions those calls sent to the tab, with the tab's answers.
            sent = await view.eval_on_selector_all(
                '[data-testid="timeline"] [data-ui-action]',
                "items => items.map(i => [i.dataset.uiAction, i.dataset.outcome])",
            )
            assert [a for a, _ in sent][:5] == [
                "read_view",
                "populate_draft",
                "open_view",
                "show_run_progress",
                "open_view",
            ], sent
            assert {o for _, o in sent} == {"succeeded"}
            # Asked and answered: who approved the save, and where.
            who = view.locator('[data-testid="approval-who"]').first
            assert "approve" in (await who.text_content() or "")
            assert "through tab" in (await who.text_content() or "")
            # The task browser's calls carry their screenshots, shown inline.
            shots = view.locator('[data-category="browser"] img[data-artifact]')
            assert await shots.count() >= 2
            for index in range(await shots.count()):
                # Loaded lazily: each one once a person scrolls to it.
                picture = shots.nth(index)
                await picture.scroll_into_view_if_needed()
                await view.wait_for_function(
                    "img => img.complete && img.naturalWidth > 0",
                    arg=await picture.element_handle(),
                )

            # An approval answered from the console while the agent's call waits.
            agent_id = (await example.dashboard.store.list_agents(ADA))[0]["id"]
            prepared = await door.call(
                "agents.prepare_draft", {"agent_id": agent_id, "fields": {"model": "sim-small"}}
            )
            assert prepared["status"] == "succeeded", prepared
            saving = asyncio.ensure_future(door.call("agents.save_draft", {"agent_id": agent_id}))
            card = view.locator('.approval[data-state="pending"]')
            await card.wait_for(timeout=15_000)
            # It shows what it approves, and takes no answer before it has been still.
            assert "agents.save_draft" in (await card.text_content() or "")
            assert await card.locator("button.approve").is_disabled()
            await card.scroll_into_view_if_needed()
            await shot(view, "approval", view.locator('[data-testid="approvals"]'))
            # A person reads it, the buttons arm, then the click: a click while the card is
            # still moving lands on a disabled button and is lost, as it should be.
            approve = card.locator("button.approve")
            await expect(approve).to_be_enabled(timeout=10_000)
            # Something above it changes and the card moves: no answer until it is still.
            await view.evaluate(
                "document.querySelector('[data-testid=\"metrics\"]').style.marginBottom = '40px'"
            )
            await expect(approve).to_be_disabled(timeout=2_000)
            await expect(approve).to_be_enabled(timeout=10_000)
            await approve.click(no_wait_after=True)
            saved = await asyncio.wait_for(saving, 30)
            assert saved["status"] == "succeeded", saved
            answered = view.locator(".approval").last
            await view.wait_for_function(
                "el => el.dataset.state === 'approved'", arg=await answered.element_handle()
            )
            assert "control-plane" in (await answered.text_content() or "")
            decided = [
                r
                for r in await example.gateway.store.evidence_for(
                    identity.org_id, task_id, limit=5000
                )
                if r.get("kind") == "approval.decided"
            ]
            assert decided[-1]["data"]["channel"] == "control"
            assert decided[-1]["data"]["approver"]["id"] == "control-plane"
            # One answer counts: a second is refused with the contract's conflict.
            csrf = await view.get_attribute('meta[name="console-csrf"]', "content")
            approval_id = await answered.get_attribute("data-approval-id")
            second = await view.request.post(
                f"{example.gateway_url}/console/api/tasks/{task_id}/approvals/{approval_id}",
                data=json.dumps({"decision": "deny"}),
                headers={"content-type": "application/json", "x-console-csrf": csrf or ""},
            )
            assert second.status == 409
            assert (await second.json())["error"]["code"] == "conflict"

        # Refused: the task's own tokens, no key, another organization's member.
        tokens = {
            purpose.value: example.gateway.tasks.mint(identity, purpose) for purpose in Purpose
        }
        async with httpx.AsyncClient(base_url=example.gateway_url) as http:
            for name, value in tokens.items():
                for url in ("/console/api/tasks", f"/console/tasks/{task_id}/export.zip"):
                    refused = await http.get(url, headers={"authorization": f"Bearer {value}"})
                    assert refused.status_code == 401, (name, url)
            assert (await http.get("/console/api/tasks")).status_code == 401
            page_refused = await http.get(f"/console/tasks/{task_id}")
            assert page_refused.status_code == 303
        stranger = await dashboard_browser.new_context()
        try:
            await stranger.add_cookies(
                [{"name": "host_session", "value": "globex-gus", "url": example.gateway_url}]
            )
            other = await stranger.new_page()
            await other.goto(f"{example.gateway_url}/console")
            assert await other.locator(f'tr[data-task-id="{task_id}"]').count() == 0
            missing = await other.goto(f"{example.gateway_url}/console/tasks/{task_id}")
            assert missing is not None and missing.status == 404
            for url in (
                f"/console/tasks/{task_id}/export.zip",
                f"/console/api/tasks/{task_id}/live",
            ):
                answer = await other.request.get(f"{example.gateway_url}{url}")
                assert answer.status == 404, url
            # The same host check lets the task's own organization in.
            await stranger.add_cookies(
                [{"name": "host_session", "value": "acme-ada", "url": example.gateway_url}]
            )
            seen = await other.goto(f"{example.gateway_url}/console/tasks/{task_id}")
            assert seen is not None and seen.status == 200
        finally:
            await stranger.close()

        # The recording: kept when the task's browser context closes, opened in the viewer.
        await example.gateway.tasks.end(task_id)
        trace = await wait_for_trace(example, identity.org_id, task_id)
        await view.reload()
        await view.evaluate("window.scrollTo(0, 0)")
        await shot(view, "task")
        browsing = view.locator('[data-testid="timeline"] li[data-category="browser"]')
        top = await browsing.first.bounding_box()
        bottom = await browsing.last.bounding_box()
        if SHOTS and top and bottom:
            await view.set_viewport_size({"width": 1360, "height": 4000})
            top = await browsing.first.bounding_box()
            bottom = await browsing.last.bounding_box()
            assert top and bottom
            await view.screenshot(
                path=str(Path(SHOTS) / "console-timeline.png"),
                clip={
                    "x": 0,
                    "y": top["y"] - 8,
                    "width": 1360,
                    "height": bottom["y"] + bottom["height"] - top["y"] + 16,
                },
            )
            await view.set_viewport_size({"width": 1360, "height": 900})
        link = view.locator('[data-testid="open-trace"]')
        async with console.expect_page() as opened_viewer:
            await link.click()
        viewer = await opened_viewer.value
        trace_path = parse_qs(urlsplit(viewer.url).query)["trace"][0]
        assert trace_path.startswith(f"/console/tasks/{task_id}/traces/")
        # The viewer lists the agent's actions; its click is one of them.
        await viewer.get_by_text(re.compile("click", re.I)).first.wait_for(timeout=30_000)
        titles = await viewer.locator(".action-title").all_text_contents()
        assert any("click" in t.lower() for t in titles), titles
        await viewer.locator(".action-title", has_text=re.compile("click", re.I)).first.click()
        await shot(viewer, "trace")

        # A crafted link naming a trace on another site opens nothing: the viewer's worker
        # reads this gateway's traces only.
        trace_bytes = await (await view.request.get(f"{example.gateway_url}{trace_path}")).body()
        async with serving(foreign_trace_site(trace_bytes)) as foreign:
            crafted = await console.new_page()
            await crafted.goto(
                f"{example.gateway_url}/console/trace-viewer/index.html?"
                + urlencode({"trace": f"{foreign}/trace.zip"})
            )
            await crafted.get_by_text(re.compile("could not load|failed", re.I)).first.wait_for(
                timeout=30_000
            )
            assert await crafted.locator(".action-title").count() == 0

        # The export: one archive with the timeline, its screenshots and the trace.
        exported = await view.request.get(
            f"{example.gateway_url}/console/tasks/{task_id}/export.zip"
        )
        assert exported.status == 200
        archive = zipfile.ZipFile(io.BytesIO(await exported.body()))
        names = set(archive.namelist())
        assert {"task.json", "timeline.json", "timeline.html", "evidence.json"} <= names
        assert f"traces/{trace['artifact_id']}.zip" in names
        assert sum(1 for n in names if n.startswith("screenshots/")) >= 2
        timeline = json.loads(archive.read("timeline.json"))
        assert [t["tool"] for t in timeline if t["tool"] in PRODUCT_TOOLS][:2] == PRODUCT_TOOLS[:2]
    finally:
        await console.close()
        await dashboard.close()
