"""The tools that read the page and change nothing on it: `snapshot` (with element refs),
`wait_for` a text or an element, and `screenshot` (kept as an artifact of the task)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page
from pydantic import Field, model_validator

from gateway.core.png import png_size
from gateway.core.registry import ToolContext

from .acting import Input, locator, session_of, snapshot_fields
from .session import SCREENSHOT_TIMEOUT_MS
from .snapshot import REF_PATTERN


class SnapshotInput(Input):
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


class WaitForInput(Input):
    text: str | None = Field(default=None, min_length=1, max_length=500)
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    timeout_ms: int = Field(default=5_000, ge=0, le=20_000)

    @model_validator(mode="after")
    def _one_target(self) -> WaitForInput:
        if (self.text is None) == (self.ref is None):
            raise ValueError("give exactly one of text or ref")
        return self


class ScreenshotInput(Input):
    full_page: bool = Field(
        default=False, description="The whole scrollable page instead of the visible part."
    )


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
