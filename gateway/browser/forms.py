"""The tools that put values into a page: fill, select_option, fill_form, type, upload.

Each first asks the element what it is (one evaluation: its kind, whether it holds a
secret), so an action it cannot take answers `unsupported` with the tool that can, before
Playwright is asked. A value goes to evidence as `[secret: N chars]` when the agent says
it is secret or the field is a password or one-time-code field; such a value is also
masked in later snapshots and kept out of the trace.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from playwright.async_api import Locator, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout
from pydantic import BaseModel, ConfigDict, Field

from gateway.core.errors import ToolFailure
from gateway.core.registry import ToolContext
from gateway.core.results import ErrorCode, ToolStatus

from .acting import (
    ACTION_TIMEOUT_MS,
    LIMITS,
    Action,
    acted,
    after_action,
    locator,
    session_of,
)
from .errors import unsupported
from .session import BrowserSession
from .snapshot import PRIVATE_FIELD_CHECK, REF_PATTERN
from .uploads import ARTIFACT_ID_PATTERN, artifact_files, workspace_files

# What an element is, for choosing the action: `file`, `select`, `checkbox`, `radio`,
# `text` (a text input, a text area, an editable element) or `other`; and whether it takes
# a secret.
FIELD_KIND = (
    "(e) => { const privateField = ("
    + PRIVATE_FIELD_CHECK
    + """)(e);
  let kind = "other";
  if (e instanceof HTMLSelectElement) kind = "select";
  else if (e instanceof HTMLInputElement) {
    kind = ["file", "checkbox", "radio"].includes(e.type) ? e.type
      : ["button", "submit", "reset", "image", "hidden"].includes(e.type) ? "other" : "text";
  } else if (e instanceof HTMLTextAreaElement || e.isContentEditable) kind = "text";
  return { kind, privateField, multiple: !!e.multiple };
}"""
)
# A select's options, for matching the agent's words to an option's value.
OPTIONS = "(e) => Array.from(e.options).map((o) => [o.value, o.label || o.text])"
MAX_OPTIONS_SHOWN = 30

_INSTEAD = {
    "file": "a file input takes browser.upload, not {tool}",
    "select": "a select takes browser.select_option, not {tool}",
    "checkbox": "a checkbox takes browser.click, not {tool}",
    "radio": "a radio button takes browser.click, not {tool}",
    "other": "this element takes no text: use browser.click, or browser.press",
}


async def field_kind(target: Locator) -> dict[str, Any]:
    found: dict[str, Any] = await target.evaluate(FIELD_KIND, timeout=ACTION_TIMEOUT_MS)
    return found


def _refuse_kind(kind: str, tool: str) -> ToolFailure:
    return unsupported(_INSTEAD[kind].format(tool=tool))


def _keep_secret(
    ctx: ToolContext,
    session: BrowserSession,
    input_field: str,
    value: object,
    *,
    secret: bool,
    private: bool,
) -> None:
    """What is typed into a private (password) field is a secret whether or not the input
    said so: the call's evidence keeps only its length (`input_field`), and no snapshot of
    the session shows it. A secret typed into a field that shows it (`secret` on a plain
    text box) keeps screenshots out of the session's trace too."""
    if private:
        ctx.secret(input_field)
    if (secret or private) and isinstance(value, str) and value:
        session.typed_secrets.add(value)
        if not private:
            session.visible_secrets = True


class FillInput(Action):
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


async def fill(ctx: ToolContext, args: FillInput) -> dict[str, Any]:
    session = await session_of(ctx)
    if args.secret:
        ctx.secret("value")

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        target = locator(session, args.ref)
        found = await field_kind(target)
        _keep_secret(
            ctx, session, "value", args.value, secret=args.secret, private=found["privateField"]
        )
        if found["kind"] != "text":
            raise _refuse_kind(found["kind"], "browser.fill")
        await target.fill(args.value, timeout=ACTION_TIMEOUT_MS)
        return {"filled": args.ref, **await after_action(session, page, navigations, args.snapshot)}

    return await acted(ctx, session, act)


class SelectInput(Action):
    ref: str = Field(pattern=REF_PATTERN, description="The select's ref from browser.snapshot.")
    options: list[str] = Field(
        min_length=1,
        max_length=100,
        description="The options to select, each by its label as the snapshot shows it or "
        "by its value; several only for a multiple select. The others are unselected.",
    )


async def _option_values(target: Locator, wanted: list[str], multiple: bool) -> list[str]:
    if len(wanted) > 1 and not multiple:
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            "this select takes one option; give one",
        )
    options: list[list[str]] = await target.evaluate(OPTIONS, timeout=ACTION_TIMEOUT_MS)
    values = []
    for word in wanted:
        by_label = [v for v, label in options if label.strip() == word.strip()]
        by_value = [v for v, _label in options if v == word]
        chosen = by_label or by_value
        if not chosen:
            shown = ", ".join(repr(label) for _v, label in options[:MAX_OPTIONS_SHOWN])
            more = " …" if len(options) > MAX_OPTIONS_SHOWN else ""
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.INVALID_INPUT,
                f"the select has no option {word[:100]!r}; its options: {shown}{more}",
            )
        values.append(chosen[0])
    return values


async def select_option(ctx: ToolContext, args: SelectInput) -> dict[str, Any]:
    session = await session_of(ctx)

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        target = locator(session, args.ref)
        found = await field_kind(target)
        if found["kind"] != "select":
            raise unsupported(
                "only a native select takes browser.select_option: open a custom list with "
                "browser.click and click its option"
            )
        values = await _option_values(target, args.options, found["multiple"])
        await target.select_option(value=values, timeout=ACTION_TIMEOUT_MS)
        return {
            "selected": args.options,
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)


class FormField(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: str = Field(pattern=REF_PATTERN, description="The field's ref from browser.snapshot.")
    value: str | bool | list[str] = Field(
        description="Text for a text field; an option's label or value (or a list, for a "
        "multiple select) for a select; true or false for a checkbox; true for a radio."
    )
    secret: bool = False


class FillFormInput(Action):
    fields: list[FormField] = Field(min_length=1, max_length=50)

    def secret_fields(self) -> list[str]:
        return ["fields"] if any(f.secret for f in self.fields) else []


async def _fill_one(session: BrowserSession, field: FormField, found: dict[str, Any]) -> None:
    target = locator(session, field.ref)
    kind, value = found["kind"], field.value
    if kind == "text" and isinstance(value, str):
        await target.fill(value, timeout=ACTION_TIMEOUT_MS)
    elif kind == "select" and not isinstance(value, bool):
        wanted = value if isinstance(value, list) else [value]
        values = await _option_values(target, wanted, found["multiple"])
        await target.select_option(value=values, timeout=ACTION_TIMEOUT_MS)
    elif kind in ("checkbox", "radio") and isinstance(value, bool):
        await target.set_checked(value, timeout=ACTION_TIMEOUT_MS)
    elif kind in ("file", "other"):
        raise unsupported(f"field {field.ref}: " + _INSTEAD[kind].format(tool="browser.fill_form"))
    else:
        expected = {"text": "text", "select": "an option", "checkbox": "true or false"}
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            f"field {field.ref} is a {kind}: its value is {expected.get(kind, 'true')}",
        )


async def fill_form(ctx: ToolContext, args: FillFormInput) -> dict[str, Any]:
    session = await session_of(ctx)
    if any(f.secret for f in args.fields):
        ctx.secret("fields")

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        kinds = [await field_kind(locator(session, f.ref)) for f in args.fields]
        for field, found in zip(args.fields, kinds, strict=True):
            private = found["privateField"]
            _keep_secret(ctx, session, "fields", field.value, secret=field.secret, private=private)
        for field, found in zip(args.fields, kinds, strict=True):
            await _fill_one(session, field, found)
        return {
            "filled": [f.ref for f in args.fields],
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)


class TypeInput(Action):
    ref: str | None = Field(
        default=None,
        pattern=REF_PATTERN,
        description="The element to type into (it gets the focus first); else the focused one.",
    )
    text: str = Field(min_length=1, max_length=2000)
    secret: bool = Field(default=False, description="As browser.fill's secret.")
    submit: bool = Field(default=False, description="Press Enter after the text.")

    def secret_fields(self) -> list[str]:
        return ["text"] if self.secret else []


async def type_text(ctx: ToolContext, args: TypeInput) -> dict[str, Any]:
    session = await session_of(ctx)
    if args.secret:
        ctx.secret("text")

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        private = False
        if args.ref is not None:
            target = locator(session, args.ref)
            found = await field_kind(target)
            private = found["privateField"]
            if found["kind"] in ("file", "select"):
                raise _refuse_kind(found["kind"], "browser.type")
        _keep_secret(ctx, session, "text", args.text, secret=args.secret, private=private)
        if args.ref is not None:
            await target.press_sequentially(args.text, timeout=ACTION_TIMEOUT_MS)
        else:
            await page.keyboard.type(args.text)
        if args.submit:
            await page.keyboard.press("Enter")
        return {
            "typed": len(args.text),
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)


class UploadInput(Action):
    ref: str = Field(
        pattern=REF_PATTERN,
        description="The file input's ref (a 'Choose File' button), or the element whose "
        "click opens the page's file chooser.",
    )
    paths: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Files of the task's workspace (relative paths). With no paths and no "
        "artifacts the input is cleared.",
    )
    artifacts: list[Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)]] = Field(
        default_factory=list,
        max_length=20,
        description="Artifacts of this task (their artifact_id: a download it kept, a "
        "screenshot), after the paths' files.",
    )


CHOOSER_WAIT_MS = 5_000


async def upload(ctx: ToolContext, args: UploadInput) -> dict[str, Any]:
    session = await session_of(ctx)
    limits = LIMITS.get()
    limit = limits.upload_max_bytes
    files = (
        await asyncio.to_thread(workspace_files, ctx.identity, ctx, args.paths, limit)
        if args.paths
        else []
    )
    if args.artifacts:
        sink = session.sink
        if sink.get_artifact is None or sink.read_artifact is None:
            raise unsupported("this gateway keeps no artifacts to upload: give workspace paths")
        files += await artifact_files(
            ctx.identity,
            args.artifacts,
            limit - sum(len(f.data) for f in files),
            limit,
            get=sink.get_artifact,
            read=sink.read_artifact,
        )
    ctx.evidence["uploaded"] = [f.public() for f in files]
    payloads: Any = [f.payload() for f in files]

    async def act(page: Page) -> dict[str, Any]:
        navigations = session.navigations
        target = locator(session, args.ref)
        found = await field_kind(target)
        if found["kind"] == "file":
            if len(files) > 1 and not found["multiple"]:
                raise unsupported("this file input takes one file: give browser.upload one path")
            await target.set_input_files(payloads, timeout=ACTION_TIMEOUT_MS)
        else:
            # A styled button that opens the page's own hidden file input.
            try:
                async with page.expect_file_chooser(timeout=CHOOSER_WAIT_MS) as waiting:
                    await target.click(timeout=ACTION_TIMEOUT_MS)
                chooser = await waiting.value
            except PlaywrightTimeout:
                raise unsupported(
                    "a click on this element opened no file chooser: give browser.upload "
                    "the ref of the file input (a 'Choose File' button)"
                ) from None
            if len(files) > 1 and not chooser.is_multiple():
                raise unsupported("this file input takes one file: give browser.upload one path")
            await chooser.set_files(payloads, timeout=ACTION_TIMEOUT_MS)
        return {
            "uploaded": [f.public() for f in files],
            **await after_action(session, page, navigations, args.snapshot),
        }

    return await acted(ctx, session, act)
