"""The `tools` permissions policy for frames, as docs/webmcp.md advises it: the dashboard's
page with the shim, shown in a cross-origin frame, registers the task's tools only where
the embedder allows it (`<iframe allow="tools">`); elsewhere Chromium refuses each
registration and the shim tells the page (`error` event, `webmcp_register_failed`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from e2e.conftest import E2E
from gateway.core.registry import Tool, ToolContext
from gateway.serving import serving

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def framed(e2e: E2E, embedder: str, allow: str | None) -> Any:
    """The test dashboard in a frame of `embedder`, its shim connected to a new task."""
    context = await e2e.browser.new_context()
    e2e._contexts.append(context)
    page = await context.new_page()
    query = f"?allow={allow}" if allow else ""
    await page.goto(f"{embedder}/{query}")
    frame = page.frame_locator("iframe")
    await frame.locator("#view").wait_for()
    [inner] = [f for f in page.frames if f.url.startswith(e2e.site.origin)]
    await inner.wait_for_function("typeof window.start === 'function'")
    body = await e2e.live.create_task(scopes=["ui"])
    await inner.evaluate(
        "(o) => window.start(o)", {"gateway": e2e.live.base_url, "token": body["tokens"]["tab"]}
    )
    return inner


class NoteInput(BaseModel):
    note: str


async def note(_ctx: ToolContext, args: NoteInput) -> dict[str, str]:
    return {"noted": args.note}


async def test_a_frame_registers_the_tasks_tools_only_where_the_embedder_allows(
    e2e: E2E,
) -> None:
    async def embedding(request: Request) -> HTMLResponse:
        allow = request.query_params.get("allow")
        attribute = f' allow="{allow}"' if allow else ""
        return HTMLResponse(f'<iframe{attribute} src="{e2e.site.origin}/"></iframe>')

    async with serving(Starlette(routes=[Route("/", embedding)])) as embedder:
        refused = await framed(e2e, embedder, None)
        allowed = await framed(e2e, embedder, "tools")
        # A new tool in the catalog: both frames are welcomed again and register anew,
        # now with the page listening.
        e2e.live.gw.registry.add(
            Tool(
                name="demo.frame_note",
                title="Note",
                description="Take a note.",
                input_model=NoteInput,
                handler=note,
                scopes=frozenset({"ui"}),
            )
        )
        for frame in (refused, allowed):
            await frame.wait_for_function(
                "window.events.filter((e) => e.type === 'welcome').length >= 1"
            )
        await refused.wait_for_function(
            "window.events.some((e) => e.type === 'error' && e.code === 'webmcp_register_failed')"
        )
        errors = await refused.evaluate("window.events.filter((e) => e.type === 'error')")
        assert all(e["code"] == "webmcp_register_failed" for e in errors)
        assert "demo_frame_note" in {e["tool"] for e in errors}
        assert all("permissions policy" in e["message"] for e in errors)
        # The same page, allowed by its embedder: registered, nothing refused.
        await allowed.wait_for_timeout(300)
        assert await allowed.evaluate("window.events.filter((e) => e.type === 'error')") == []
