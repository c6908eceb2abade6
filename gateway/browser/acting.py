"""What every browser tool does around its own action: find the task's session, resolve a
ref to an element, run the action under the session's guard, and answer with what changed.

An acting tool's answer carries the lines of the page's snapshot that changed since the
previous one of the same document (`changes`); after a navigation, the new page's title and
outline (`title`, `outline`), and its whole snapshot only when the agent asks for it
(`snapshot: true`, or `browser.snapshot`) or the page is a form's answer. A dialog the
action opened ends the call at once with what the page asked (`session.race_dialog`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator, Page
from pydantic import BaseModel, ConfigDict, Field

from gateway.core.errors import ToolFailure
from gateway.core.registry import Handler, ToolContext
from gateway.parts import BrowserToolsConfig

from .errors import first_line
from .outline import outline
from .pool import BrowserPool
from .session import BrowserSession
from .snapshot import REF_PATTERN, Snapshot, changes, hint, resolve_ref

# Generous: on a loaded machine a renderer can take seconds to answer; the tool's own
# deadline still bounds the whole call.
NAVIGATION_TIMEOUT_MS = 45_000
ACTION_TIMEOUT_MS = 30_000
# Navigation (45 s) and its snapshot stay inside the tool's 60 s deadline.
NAVIGATE_SNAPSHOT_TIMEOUT_MS = 10_000
# How long an action's answer waits for the navigation it started to be over.
SETTLE_NAVIGATION_S = 10.0


DEFAULT_LIMITS = BrowserToolsConfig()
# The calling gateway's bounds on what crosses between a task's files and its pages, set
# around each browser tool's handler (`with_limits`).
LIMITS: ContextVar[BrowserToolsConfig] = ContextVar("browser_limits", default=DEFAULT_LIMITS)


def with_limits(limits: BrowserToolsConfig, handler: Handler) -> Handler:
    async def bound(ctx: ToolContext, args: Any) -> Any:
        token = LIMITS.set(limits)
        try:
            return await handler(ctx, args)
        finally:
            LIMITS.reset(token)

    return bound


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Action(Input):
    snapshot: bool = Field(
        default=False,
        description="Answer with the page's whole snapshot, not only what changed (or, "
        "after a navigation, the new page's title and outline).",
    )


RefField = Field(pattern=REF_PATTERN, description="An element ref from browser.snapshot.")


async def session_of(ctx: ToolContext) -> BrowserSession:
    session = await ctx.service(BrowserPool).session_for(ctx.identity, ctx.time_left())
    session.download_max_bytes = LIMITS.get().download_max_bytes
    return session


def locator(session: BrowserSession, ref: str) -> Locator:
    name = resolve_ref(ref, session.refs, session.document)
    return session.page.locator(f"aria-ref={name}")


async def acted(
    ctx: ToolContext,
    session: BrowserSession,
    act: Callable[[Page], Awaitable[dict[str, Any]]],
    *,
    answers_dialog: bool = False,
) -> dict[str, Any]:
    """Run an action on the page; its result names the page it left, with a screenshot."""
    result = await session.run(ctx, act, dialog_aware=True, answers_dialog=answers_dialog)
    result["url"] = session.url
    if len(session.pages) > 1:
        result["page"] = session.page_id
    await keep_screenshot(ctx, session)
    return result


async def keep_screenshot(ctx: ToolContext, session: BrowserSession) -> None:
    """With `browser_screenshots` on, each acting call leaves a screenshot in its evidence.
    The call's outcome is decided already: a screenshot that fails is only not kept (nor
    taken while a dialog holds the page)."""
    if not session.keep_screenshots or session.lost is not None or session.dialog is not None:
        return
    with contextlib.suppress(ToolFailure):
        ref = await session.keep_screenshot(ctx.identity, time_left=ctx.time_left())
        ctx.evidence["screenshot"] = ref.id


def snapshot_fields(snap: Snapshot) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "snapshot_id": f"s{snap.seq}",
        "snapshot": snap.text,
        "truncated": snap.truncated,
    }
    narrow = hint(snap)
    if narrow is not None:
        fields["hint"] = narrow
    return fields


async def after_action(
    session: BrowserSession, page: Page, navigations: int, whole: bool
) -> dict[str, Any]:
    """What the action changed: the lines of the page's snapshot that differ from the
    previous one of the same document (refs that did not change stay valid); after a
    navigation, the new page's title and outline (`loaded_fields`); the whole snapshot
    when asked, or when the new page is a form's answer (below). A snapshot that fails
    does not fail the action, which has happened: it says why."""
    await session.settle_navigation(navigations, SETTLE_NAVIGATION_S)
    before = session.latest
    try:
        after = await _settled_snapshot(session)
    except PlaywrightError as exc:
        return {"snapshot_error": first_line(exc)}
    page = session.page  # the action may have closed its page, or a popup may be current
    if before is not None and before.document == after.document and not whole:
        return {"snapshot_id": f"s{after.seq}", "changes": changes(before, after)}
    # A page the server sent as its answer to a form (not a redirect to the form's result)
    # is the form again with its errors, or a step that asks to confirm: the agent's next
    # step reads it, so it comes whole.
    if whole or before is None or session.navigation_method == "POST":
        return snapshot_fields(after)
    return await loaded_fields(page, after)


async def _settled_snapshot(session: BrowserSession) -> Snapshot:
    """The page's snapshot once the navigation the action set off is over. A navigation
    can start after the action returns (a form a key submitted) and land during the
    capture, whose refs are then stale and which is of neither document: it is taken
    again once that navigation is over."""
    for _ in range(2):
        seen = session.navigations
        snap = await session.take_snapshot(session.page, timeout_ms=NAVIGATE_SNAPSHOT_TIMEOUT_MS)
        if session.document == snap.document and session.navigations == seen:
            return snap
        await session.navigation_over(SETTLE_NAVIGATION_S)
    return await session.take_snapshot(session.page, timeout_ms=NAVIGATE_SNAPSHOT_TIMEOUT_MS)


WHOLE_PAGE_HINT = "browser.snapshot reads the whole page ({chars} characters)"


async def loaded_fields(page: Page, snap: Snapshot) -> dict[str, Any]:
    """A page an action loaded, in short: its title, its outline (headings of level 1 and
    what it says to its user, with refs of `snap`), and how to read it whole."""
    title = ""
    with contextlib.suppress(PlaywrightError):
        title = await page.title()
    return {
        "snapshot_id": f"s{snap.seq}",
        "title": title[:300],
        "outline": outline(snap.text),
        "hint": WHOLE_PAGE_HINT.format(chars=snap.total_chars),
    }


async def snapshot_after_load(session: BrowserSession, page: Page) -> dict[str, Any]:
    """The navigated page's snapshot. The first snapshot of a document is the costly one
    (Playwright's page script is installed then), and an agent's next step after opening a
    page is to read it, so navigate pays for it once and hands it over. The navigation has
    happened either way: a snapshot that fails does not fail the call, it says why."""
    try:
        snap = await session.take_snapshot(page, timeout_ms=NAVIGATE_SNAPSHOT_TIMEOUT_MS)
    except PlaywrightError as exc:
        return {"snapshot_id": None, "snapshot": None, "snapshot_error": first_line(exc)}
    return snapshot_fields(snap)


async def element_act(
    ctx: ToolContext,
    session: BrowserSession,
    whole: bool,
    done: dict[str, Any],
    do: Callable[[Page], Awaitable[Any]],
) -> dict[str, Any]:
    """An action on the page answered with `done` and what it changed."""

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        await do(page)
        return {**done, **await after_action(session, page, navigations, whole)}

    return await acted(ctx, session, act)
