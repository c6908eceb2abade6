"""The browser tools (scope `browser`): drive the task's own isolated browser.

Every tool acts on the calling task's context only (the pool looks it up by the call's
identity, never by anything in the input). Element refs come from `browser.snapshot` and
belong to that snapshot; the evidence of each call names the page it acted on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.errors import ToolFailure
from gateway.png import png_size
from gateway.registry import Registry, Tool, ToolAnnotations, ToolContext
from gateway.settings import Settings

from .errors import first_line
from .policy import resolve_target
from .pool import BrowserPool
from .session import SCREENSHOT_TIMEOUT_MS, BrowserSession
from .snapshot import PRIVATE_FIELD_CHECK, REF_PATTERN, Snapshot, changes, hint, resolve_ref

SCOPE = "browser"
# Generous: on a loaded machine a renderer can take seconds to answer; the tool's own
# deadline still bounds the whole call.
NAVIGATION_TIMEOUT_MS = 45_000
ACTION_TIMEOUT_MS = 30_000
# Navigation (45 s) and its snapshot stay inside the tool's 60 s deadline.
NAVIGATE_SNAPSHOT_TIMEOUT_MS = 10_000
# How long an action's answer waits for the navigation it started to be over.
SETTLE_NAVIGATION_S = 10.0
KEY_PATTERN = r"^(?:[A-Za-z0-9]{1,24}\+){0,3}(?:[A-Za-z0-9]{1,24}|[!-~])$"


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


class _Action(_Input):
    snapshot: bool = Field(
        default=False,
        description="Answer with the page's whole snapshot, not only what changed.",
    )


class ClickInput(_Action):
    ref: str = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")


class FillInput(_Action):
    ref: str = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")
    value: str = Field(max_length=10_000)
    secret: bool = Field(
        default=False,
        description="The value is a secret: evidence keeps only its length. A password "
        "field is always treated so.",
    )

    def secret_fields(self) -> list[str]:
        # Known from the input alone, so masked before the fill runs (or is refused).
        return ["value"] if self.secret else []


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


async def _session(ctx: ToolContext) -> BrowserSession:
    return await ctx.service(BrowserPool).session_for(ctx.identity)


async def _acted(
    ctx: ToolContext, session: BrowserSession, act: Callable[[Page], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Run an action on the page; its result names the page it left, with a screenshot."""
    result = await session.run(ctx, act)
    result["url"] = session.url
    await _keep_screenshot(ctx, session)
    return result


async def _keep_screenshot(ctx: ToolContext, session: BrowserSession) -> None:
    """With `browser_screenshots` on, each acting call leaves a screenshot in its evidence.
    The call's outcome is decided already: a screenshot that fails is only not kept."""
    if not session.keep_screenshots or session.lost is not None:
        return
    with contextlib.suppress(ToolFailure):
        ref = await session.keep_screenshot(ctx.identity, time_left=ctx.time_left())
        ctx.evidence["screenshot"] = ref.id


def _locator(session: BrowserSession, page: Page, ref: str) -> Any:
    name = resolve_ref(ref, session.refs, session.document)
    return page.locator(f"aria-ref={name}")


async def navigate(ctx: ToolContext, args: NavigateInput) -> dict[str, Any]:
    # Checked before the browser is touched: a refused URL never reaches Chromium.
    target = resolve_target(args.url, ctx.identity.sandbox)
    session = await _session(ctx)

    async def act(page: Page) -> dict[str, Any]:
        response = await page.goto(target, wait_until="load", timeout=NAVIGATION_TIMEOUT_MS)
        result: dict[str, Any] = {
            "url": page.url,
            "status": response.status if response is not None else None,
        }
        if args.snapshot:
            result.update(await _snapshot_after_load(session, page))
        return result

    result = await session.run(ctx, act)
    await _keep_screenshot(ctx, session)
    return result


def _snapshot_fields(snap: Snapshot) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "snapshot_id": f"s{snap.seq}",
        "snapshot": snap.text,
        "truncated": snap.truncated,
    }
    narrow = hint(snap)
    if narrow is not None:
        fields["hint"] = narrow
    return fields


async def _after_action(
    session: BrowserSession, page: Page, navigations: int, whole: bool
) -> dict[str, Any]:
    """What the action changed: the lines of the page's snapshot that differ from the
    previous one of the same document (refs that did not change stay valid), or the whole
    snapshot after a navigation or when asked. A snapshot that fails does not fail the
    action, which has happened: it says why."""
    await session.settle_navigation(navigations, SETTLE_NAVIGATION_S)
    before = session.latest
    try:
        after = await session.take_snapshot(page, timeout_ms=NAVIGATE_SNAPSHOT_TIMEOUT_MS)
    except PlaywrightError as exc:
        return {"snapshot_error": first_line(exc)}
    if whole or before is None or before.document != after.document:
        return _snapshot_fields(after)
    return {"snapshot_id": f"s{after.seq}", "changes": changes(before, after)}


async def _snapshot_after_load(session: BrowserSession, page: Page) -> dict[str, Any]:
    """The navigated page's snapshot. The first snapshot of a document is the costly one
    (Playwright's page script is installed then), and an agent's next step after opening a
    page is to read it, so navigate pays for it once and hands it over. The navigation has
    happened either way: a snapshot that fails does not fail the call, it says why."""
    try:
        snap = await session.take_snapshot(page, timeout_ms=NAVIGATE_SNAPSHOT_TIMEOUT_MS)
    except PlaywrightError as exc:
        return {"snapshot_id": None, "snapshot": None, "snapshot_error": first_line(exc)}
    return _snapshot_fields(snap)


async def snapshot(ctx: ToolContext, args: SnapshotInput) -> dict[str, Any]:
    session = await _session(ctx)

    async def act(page: Page) -> dict[str, Any]:
        scope = None
        if args.ref is not None:
            scope = _locator(session, page, args.ref)
        elif args.role is not None:
            scope = page.get_by_role(args.role, name=args.name, exact=True).first  # type: ignore[arg-type]
        snap = await session.take_snapshot(page, scope=scope, depth=args.depth)
        return {"url": page.url, **_snapshot_fields(snap)}

    return await session.run(ctx, act)


async def click(ctx: ToolContext, args: ClickInput) -> dict[str, Any]:
    session = await _session(ctx)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        await _locator(session, page, args.ref).click(timeout=ACTION_TIMEOUT_MS)
        return {
            "clicked": args.ref,
            **await _after_action(session, page, navigations, args.snapshot),
        }

    return await _acted(ctx, session, act)


async def fill(ctx: ToolContext, args: FillInput) -> dict[str, Any]:
    session = await _session(ctx)
    if args.secret:
        ctx.secret("value")
        # Its text box shows the value in later snapshots: masked there too.
        session.typed_secrets.add(args.value)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        target = _locator(session, page, args.ref)
        private = await target.evaluate(PRIVATE_FIELD_CHECK, timeout=ACTION_TIMEOUT_MS)
        if private:
            ctx.secret("value")
        await target.fill(args.value, timeout=ACTION_TIMEOUT_MS)
        return {
            "filled": args.ref,
            **await _after_action(session, page, navigations, args.snapshot),
        }

    return await _acted(ctx, session, act)


async def press(ctx: ToolContext, args: PressInput) -> dict[str, Any]:
    session = await _session(ctx)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        if args.ref is not None:
            await _locator(session, page, args.ref).press(args.key, timeout=ACTION_TIMEOUT_MS)
        else:
            await page.keyboard.press(args.key)
        return {
            "pressed": args.key,
            **await _after_action(session, page, navigations, args.snapshot),
        }

    return await _acted(ctx, session, act)


async def wait_for(ctx: ToolContext, args: WaitForInput) -> dict[str, Any]:
    session = await _session(ctx)

    async def act(page: Page) -> dict[str, Any]:
        if args.ref is not None:
            target = _locator(session, page, args.ref)
        else:
            target = page.get_by_text(args.text or "").first
        await target.wait_for(state="visible", timeout=args.timeout_ms)
        return {"found": True, "url": page.url}

    return await session.run(ctx, act)


async def screenshot(ctx: ToolContext, args: ScreenshotInput) -> dict[str, Any]:
    session = await _session(ctx)
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
            "the page (the whole snapshot after a navigation, or with snapshot true).",
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
            handler=fill,
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
    ]


def register(registry: Registry, settings: Settings) -> None:
    for tool in tools(settings):
        registry.add(tool)
