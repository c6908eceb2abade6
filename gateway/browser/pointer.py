"""The pointer tools: hover over an element (menus that open on hover, tooltips) and drag
one element onto another (sortable lists, boards)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page
from pydantic import Field

from gateway.core.registry import ToolContext

from .acting import ACTION_TIMEOUT_MS, Action, element_act, locator, session_of
from .snapshot import REF_PATTERN


class HoverInput(Action):
    ref: str = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")


async def hover(ctx: ToolContext, args: HoverInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def do(_page: Page) -> None:
        await locator(session, args.ref).hover(timeout=ACTION_TIMEOUT_MS)

    return await element_act(ctx, session, args.snapshot, {"hovered": args.ref}, do)


class DragInput(Action):
    ref: str = Field(pattern=REF_PATTERN, description="The element to drag.")
    to_ref: str = Field(pattern=REF_PATTERN, description="The element to drop it on.")


async def drag(ctx: ToolContext, args: DragInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def do(_page: Page) -> None:
        source, target = locator(session, args.ref), locator(session, args.to_ref)
        await source.drag_to(target, timeout=ACTION_TIMEOUT_MS)

    return await element_act(
        ctx, session, args.snapshot, {"dragged": args.ref, "to": args.to_ref}, do
    )
