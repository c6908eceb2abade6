"""The browser tools (scope `browser`): drive the task's own isolated browser.

Every tool acts on the calling task's context only (the pool looks it up by the call's
identity, never by anything in the input). Element refs come from `browser.snapshot` and
belong to that snapshot; the evidence of each call names the page it acted on.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from playwright.async_api import Page
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.core.png import png_size
from gateway.core.registry import Handler, Registry, Tool, ToolAnnotations, ToolContext
from gateway.settings import Settings

from . import forms, pages, pointer
from .acting import (
    ACTION_TIMEOUT_MS,
    NAVIGATION_TIMEOUT_MS,
    Limits,
    acted,
    after_action,
    keep_screenshot,
    locator,
    session_of,
    snapshot_after_load,
    snapshot_fields,
    with_limits,
)
from .acting import (
    Action as _Action,
)
from .errors import unsupported
from .forms import FillInput
from .policy import resolve_target
from .session import SCREENSHOT_TIMEOUT_MS
from .snapshot import REF_PATTERN

SCOPE = "browser"
KEY_PATTERN = r"^(?:[A-Za-z0-9]{1,24}\+){0,3}(?:[A-Za-z0-9]{1,24}|[!-~])$"
# Kept for the callers of its former name.
_snapshot_after_load = snapshot_after_load


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NavigateInput(_Input):
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


class SnapshotInput(_Input):
    ref: str | None = Field(
        default=None, pattern=REF_PATTERN, description="Only this element (a ref) and within."
    )
    role: str | None = Field(
        default=None,
        pattern=r"^[a-z]{1,32}$",
        description="Only the first element of this ARIA role (e.g. table, form, main), "
        "with `name` if given, and within.",
    )
    name: str | None = Field(default=None, min_length=1, max_length=200)
    depth: int | None = Field(
        default=None, ge=1, le=64, description="Only this many levels below the top."
    )

    @model_validator(mode="after")
    def _one_scope(self) -> SnapshotInput:
        if self.ref is not None and self.role is not None:
            raise ValueError("give a ref, or a role (and name), not both")
        if self.name is not None and self.role is None:
            raise ValueError("a name narrows a role: give the role too")
        return self


class ClickInput(_Action):
    ref: str = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")


class PressInput(_Action):
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    key: str = Field(pattern=KEY_PATTERN, description="A key name such as Enter or Control+a.")


class WaitForInput(_Input):
    text: str | None = Field(default=None, min_length=1, max_length=500)
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    timeout_ms: int = Field(default=5_000, ge=0, le=20_000)

    @model_validator(mode="after")
    def _one_target(self) -> WaitForInput:
        if (self.text is None) == (self.ref is None):
            raise ValueError("give exactly one of text or ref")
        return self


class ScreenshotInput(_Input):
    full_page: bool = Field(
        default=False, description="The whole scrollable page instead of the visible part."
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


async def snapshot(ctx: ToolContext, args: SnapshotInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        scope = None
        if args.ref is not None:
            scope = locator(session, args.ref)
        elif args.role is not None:
            scope = page.get_by_role(args.role, name=args.name, exact=True).first  # type: ignore[arg-type]
        snap = await session.take_snapshot(page, scope=scope, depth=args.depth)
        return {"url": page.url, **snapshot_fields(snap)}

    return await session.run(ctx, act, keeps_refs=args.ref is None, reads_only=True)


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


async def wait_for(ctx: ToolContext, args: WaitForInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        if args.ref is not None:
            target = locator(session, args.ref)
        else:
            target = page.get_by_text(args.text or "").first
        await target.wait_for(state="visible", timeout=args.timeout_ms)
        return {"found": True, "url": page.url}

    return await session.run(ctx, act)


async def screenshot(ctx: ToolContext, args: ScreenshotInput) -> dict[str, Any]:
    session = await session_of(ctx)
    # Through `run`, as every call: the guard's verdict and the page it was taken of.
    shot = await session.run(
        ctx,
        lambda page: page.screenshot(
            type="png", full_page=args.full_page, timeout=SCREENSHOT_TIMEOUT_MS
        ),
    )
    ref = await session.keep_png(ctx.identity, shot)
    width, height = png_size(shot) or (0, 0)
    return {"artifact": ref.public(), "url": session.url, "width": width, "height": height}


def tools(settings: Settings) -> list[Tool]:
    """The browser tools, bounded for this gateway's snapshot size."""
    snapshot_bytes = max(64 * 1024, settings.browser_snapshot_max_chars * 4 + 4096)
    read = ToolAnnotations(read_only_hint=True, untrusted_content_hint=True)
    act = ToolAnnotations(untrusted_content_hint=True)
    common: dict[str, Any] = {"scopes": frozenset({SCOPE}), "timeout_s": 60.0}
    return [
        Tool(
            name="browser.navigate",
            title="Open a page",
            description="Open a URL of the task's sandbox app in the task's own browser; the "
            "answer carries the loaded page's snapshot with element refs, as "
            "browser.snapshot's does (unless snapshot is false).",
            input_model=NavigateInput,
            handler=navigate,
            annotations=act,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        ),
        Tool(
            name="browser.snapshot",
            title="Read the page",
            description="An accessibility snapshot of the current page with element refs, "
            "bounded (a cut one says how to narrow it); narrow it to an element (ref), an "
            "ARIA role and name, or a depth.",
            input_model=SnapshotInput,
            handler=snapshot,
            annotations=read,
            max_output_bytes=snapshot_bytes,
            **common,
        ),
        Tool(
            name="browser.click",
            title="Click an element",
            description="Click the element a ref names. The answer says what changed on "
            "the page; after a navigation, the new page's title and outline (browser.snapshot "
            "or snapshot true for the whole page).",
            input_model=ClickInput,
            handler=click,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        ),
        Tool(
            name="browser.fill",
            title="Fill a field",
            description="Replace the value of the text field a ref names; the answer says "
            "what changed on the page.",
            input_model=FillInput,
            handler=forms.fill,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        ),
        Tool(
            name="browser.press",
            title="Press a key",
            description="Press a key, on the element a ref names or on the focused one.",
            input_model=PressInput,
            handler=press,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        ),
        Tool(
            name="browser.wait_for",
            title="Wait for text or an element",
            description="Wait until a text, or the element a ref names, is visible.",
            input_model=WaitForInput,
            handler=wait_for,
            annotations=read,
            max_output_bytes=16 * 1024,
            long_running=True,
            **common,
        ),
        Tool(
            name="browser.screenshot",
            title="Take a screenshot",
            description="A PNG of the visible page, kept as an artifact of the task.",
            input_model=ScreenshotInput,
            handler=screenshot,
            annotations=ToolAnnotations(read_only_hint=True),
            max_output_bytes=16 * 1024,
            **common,
        ),
        *_more_tools(settings, act, read, common, snapshot_bytes),
    ]


def _more_tools(
    settings: Settings,
    act: ToolAnnotations,
    read: ToolAnnotations,
    common: dict[str, Any],
    snapshot_bytes: int,
) -> list[Tool]:
    def acting(
        name: str, title: str, description: str, model: type[BaseModel], handler: Handler
    ) -> Tool:
        return Tool(
            name=name,
            title=title,
            description=description,
            input_model=model,
            handler=handler,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        )

    changed = " The answer says what changed on the page."
    return [
        acting(
            "browser.select_option",
            "Choose in a select",
            "Select options of a native select (a combobox or listbox in the snapshot) by "
            "label or value; several only for a multiple select." + changed,
            forms.SelectInput,
            forms.select_option,
        ),
        acting(
            "browser.fill_form",
            "Fill several fields",
            "Fill several fields in one call: text fields with text, selects with an "
            "option, checkboxes and radios with true or false." + changed,
            forms.FillFormInput,
            forms.fill_form,
        ),
        acting(
            "browser.type",
            "Type text key by key",
            "Type text one key at a time, for editors that ignore browser.fill; into the "
            "element a ref names, else the focused one." + changed,
            forms.TypeInput,
            forms.type_text,
        ),
        acting(
            "browser.upload",
            "Upload files",
            "Give a file input (or the button that opens a file chooser) files of the "
            "task's workspace, by relative path; bounded in size." + changed,
            forms.UploadInput,
            forms.upload,
        ),
        acting(
            "browser.hover",
            "Hover over an element",
            "Move the pointer over the element a ref names (menus that open on hover)." + changed,
            pointer.HoverInput,
            pointer.hover,
        ),
        acting(
            "browser.drag",
            "Drag and drop",
            "Drag the element `ref` names onto the element `to_ref` names." + changed,
            pointer.DragInput,
            pointer.drag,
        ),
        acting(
            "browser.navigate_back",
            "Go back",
            "Go back one page in the current page's history; the answer carries its snapshot.",
            pages.HistoryInput,
            pages.navigate_back,
        ),
        acting(
            "browser.navigate_forward",
            "Go forward",
            "Go forward one page in the current page's history; the answer carries its snapshot.",
            pages.HistoryInput,
            pages.navigate_forward,
        ),
        acting(
            "browser.handle_dialog",
            "Answer a dialog",
            "Accept or dismiss the dialog (alert, confirm, prompt, leave-page) a call's "
            "answer reported; the action it held then goes on, and its answer comes with "
            "this one.",
            pages.DialogInput,
            pages.handle_dialog,
        ),
        acting(
            "browser.pages",
            "List, switch or close pages",
            "The task's pages (popups and new tabs on its origins become pages): list "
            "them, make one current (switch_to, its snapshot comes with the answer), or "
            "close one.",
            pages.PagesInput,
            pages.pages,
        ),
        Tool(
            name="browser.console",
            title="Read the console",
            description="The pages' console messages and uncaught errors, numbered; "
            "`since` a number an earlier answer gave as `last`. Bounded and redacted.",
            input_model=pages.SignalsInput,
            handler=pages.console,
            annotations=read,
            max_output_bytes=256 * 1024,
            **common,
        ),
        Tool(
            name="browser.network",
            title="Read the network",
            description="The responses the pages received from the task's origins "
            "(method, URL without query values, status, type), numbered; `since` a number "
            "an earlier answer gave as `last`.",
            input_model=pages.SignalsInput,
            handler=pages.network,
            annotations=read,
            max_output_bytes=256 * 1024,
            **common,
        ),
    ]


def bounded_tools(settings: Settings) -> list[Tool]:
    """The tools, each run with this gateway's upload and download bounds."""
    limits = Limits.of(settings)
    return [replace(tool, handler=with_limits(limits, tool.handler)) for tool in tools(settings)]


def register(registry: Registry, settings: Settings) -> None:
    for tool in bounded_tools(settings):
        registry.add(tool)
