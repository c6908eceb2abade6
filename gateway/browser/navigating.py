"""The tools that take the current page elsewhere: `navigate` to a URL of the task, and
`navigate_back`/`navigate_forward` in its history. Each answers with the page it loaded
(its snapshot, unless the agent says not to); a page that asks before it is left
(beforeunload) answers with its dialog."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Page
from pydantic import Field

from gateway.core.registry import ToolContext

from .acting import (
    NAVIGATION_TIMEOUT_MS,
    Input,
    acted,
    keep_screenshot,
    session_of,
    snapshot_after_load,
)
from .policy import resolve_target


class NavigateInput(Input):
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="An absolute URL within the task's allowed origins, or a path such as "
        "/agents resolved against the sandbox's app origin.",
    )
    snapshot: bool = Field(
        default=True,
        description="Also return the loaded page's snapshot with element refs, as "
        "browser.snapshot does, so the next action needs no call of its own.",
    )


async def navigate(ctx: ToolContext, args: NavigateInput) -> dict[str, Any]:
    # Checked before the browser is touched: a refused URL never reaches Chromium.
    target = resolve_target(args.url, ctx.identity.sandbox)
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        session.leaving = True
        going = asyncio.ensure_future(
            page.goto(target, wait_until="load", timeout=NAVIGATION_TIMEOUT_MS)
        )
        stuck = asyncio.ensure_future(session.stuck.wait())
        try:
            await asyncio.wait({going, stuck}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stuck.cancel()
        if going.done():
            response = going.result()
        else:
            # The page keeps opening dialogs and never unloads: a fresh page goes instead.
            going.cancel()
            page = await session.replace_page()
            response = await page.goto(target, wait_until="load", timeout=NAVIGATION_TIMEOUT_MS)
        result: dict[str, Any] = {
            "url": page.url,
            "status": response.status if response is not None else None,
        }
        if args.snapshot:
            result.update(await snapshot_after_load(session, page))
        return result

    # A page that asks before it is left (beforeunload) answers with its dialog.
    result = await session.run(ctx, act, dialog_aware=True)
    await keep_screenshot(ctx, session)
    return result


class HistoryInput(Input):
    snapshot: bool = Field(default=True, description="Also return the page's snapshot.")


async def _history(ctx: ToolContext, args: HistoryInput, forward: bool) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        session.leaving = True
        move = page.go_forward if forward else page.go_back
        response = await move(wait_until="load", timeout=NAVIGATION_TIMEOUT_MS)
        result: dict[str, Any] = {
            "moved": response is not None,
            "status": response.status if response is not None else None,
        }
        if args.snapshot:
            result.update(await snapshot_after_load(session, page))
        return result

    return await acted(ctx, session, act)


async def navigate_back(ctx: ToolContext, args: HistoryInput) -> dict[str, Any]:
    return await _history(ctx, args, forward=False)


async def navigate_forward(ctx: ToolContext, args: HistoryInput) -> dict[str, Any]:
    return await _history(ctx, args, forward=True)
