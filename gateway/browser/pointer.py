"""The tools that act on one element with the pointer or a key: click it, press a key on it
(or on the focused one), hover over it (menus that open on hover, tooltips) and drag it onto
another (sortable lists, boards). Each answers with what changed on the page."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page
from pydantic import Field

from gateway.core.registry import ToolContext

from . import forms
from .acting import (
    ACTION_TIMEOUT_MS,
    Action,
    acted,
    after_action,
    element_act,
    locator,
    session_of,
)
from .errors import unsupported
from .snapshot import REF_PATTERN

KEY_PATTERN = r"^(?:[A-Za-z0-9]{1,24}\+){0,3}(?:[A-Za-z0-9]{1,24}|[!-~])$"


class ClickInput(Action):
    ref: str = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")


class PressInput(Action):
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    key: str = Field(pattern=KEY_PATTERN, description="A key name such as Enter or Control+a.")


async def click(ctx: ToolContext, args: ClickInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        target = locator(session, args.ref)
        # A file input's click opens a chooser no click can fill. (Listening for choosers
        # instead makes Chromium intercept them, which slowed a 5000-row page's snapshot
        # from about 5 s to over 10.)
        if (await forms.field_kind(target))["kind"] == "file":
            raise unsupported(
                f"a file input takes browser.upload (with ref {args.ref} and workspace "
                "paths), not a click"
            )
        await target.click(timeout=ACTION_TIMEOUT_MS)
        return {
            "clicked": args.ref,
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)


async def press(ctx: ToolContext, args: PressInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        if args.ref is not None:
            await locator(session, args.ref).press(args.key, timeout=ACTION_TIMEOUT_MS)
        else:
            await page.keyboard.press(args.key)
        return {
            "pressed": args.key,
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)


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
