"""The tools about the task's pages rather than one element: its pages (popups and new
tabs it kept), dialogs, and what its pages said (console, network)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page
from pydantic import Field, model_validator

from gateway.core.errors import ToolFailure
from gateway.core.registry import ToolContext
from gateway.core.results import ErrorCode, ToolStatus

from .acting import Input, acted, session_of, snapshot_after_load
from .session import BrowserSession

PAGE_PATTERN = r"^p[0-9]{1,6}$"


class PagesInput(Input):
    switch_to: str | None = Field(
        default=None, pattern=PAGE_PATTERN, description="Make this page current (e.g. p2)."
    )
    close: str | None = Field(default=None, pattern=PAGE_PATTERN, description="Close this page.")

    @model_validator(mode="after")
    def _one(self) -> PagesInput:
        if self.switch_to is not None and self.close is not None:
            raise ValueError("give switch_to or close, not both")
        return self


def _no_page(session: BrowserSession, page_id: str) -> ToolFailure:
    known = ", ".join(session.pages)
    return ToolFailure(
        ToolStatus.FAILED,
        ErrorCode.STALE_TARGET,
        f"the task has no page {page_id}; its pages: {known}",
    )


async def pages(ctx: ToolContext, args: PagesInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(_page: Page) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if args.close is not None:
            closing = session.pages.get(args.close)
            if closing is None:
                raise _no_page(session, args.close)
            if len(session.pages) == 1:
                raise ToolFailure(
                    ToolStatus.FAILED,
                    ErrorCode.INVALID_INPUT,
                    "that is the task's only page; it closes with the task",
                )
            await closing.close()
            result["closed"] = args.close
        if args.switch_to is not None:
            if args.switch_to not in session.pages:
                raise _no_page(session, args.switch_to)
            session.switch_to(args.switch_to)
        if args.switch_to is not None or args.close is not None:
            # The current page changed or may have: its refs are new, so its snapshot comes.
            await session.page.bring_to_front()
            result.update(await snapshot_after_load(session, session.page))
        result["pages"] = session.page_list()
        return result

    return await acted(ctx, session, act)


class DialogInput(Input):
    accept: bool = Field(description="true: OK (accept); false: Cancel (dismiss).")
    prompt_text: str | None = Field(
        default=None, max_length=2000, description="The answer to a prompt dialog."
    )


async def handle_dialog(ctx: ToolContext, args: DialogInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(_page: Page) -> dict[str, Any]:
        pending = session.take_dialog()
        if pending is None:
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.STALE_TARGET,
                "no dialog is open (one nobody answered was dismissed; the call that "
                "dismissed it says so)",
            )
        if args.accept:
            await pending.dialog.accept(args.prompt_text or "")
        else:
            await pending.dialog.dismiss()
        answered = {**pending.public(), "accepted": args.accept}
        ctx.evidence["dialog"] = answered
        result: dict[str, Any] = {"answered": answered}
        parked, session.parked = session.parked, None
        if parked is not None:
            # The action the dialog held goes on, and its answer is this call's.
            rest = await session.race_dialog(parked)
            if isinstance(rest, dict):
                result.update(rest)
        return result

    return await acted(ctx, session, act, answers_dialog=True)


class SignalsInput(Input):
    since: int = Field(
        default=0, ge=0, description="Only entries after this number (an answer's `last`)."
    )
    limit: int = Field(default=100, ge=1, le=500)


async def _signals(ctx: ToolContext, args: SignalsInput, kind: str) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(_page: Page) -> dict[str, Any]:
        return session.signals.since(kind, args.since, args.limit)

    # A list the gateway kept: nothing on the page is touched, so no action slot is taken.
    return await session.run(ctx, act, reads_only=True)


async def console(ctx: ToolContext, args: SignalsInput) -> dict[str, Any]:
    return await _signals(ctx, args, "console")


async def network(ctx: ToolContext, args: SignalsInput) -> dict[str, Any]:
    return await _signals(ctx, args, "network")
