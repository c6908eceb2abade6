"""The browser tools (scope `browser`): drive the task's own isolated browser.

Every tool acts on the calling task's context only (the pool looks it up by the call's
identity, never by anything in the input). Element refs come from `browser.snapshot` and
belong to that snapshot; the evidence of each call names the page it acted on. This is
their catalog: each tool's name, words, bounds and handler, by kind; the handlers are in
`navigating.py`, `looking.py`, `pointer.py`, `forms.py` and `pages.py`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from gateway.core.registry import Handler, Registry, Tool, ToolAnnotations
from gateway.settings import Settings

from . import forms, looking, navigating, pages, pointer
from .acting import Limits, with_limits

SCOPE = "browser"


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
            input_model=navigating.NavigateInput,
            handler=navigating.navigate,
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
            input_model=looking.SnapshotInput,
            handler=looking.snapshot,
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
            input_model=pointer.ClickInput,
            handler=pointer.click,
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
            input_model=forms.FillInput,
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
            input_model=pointer.PressInput,
            handler=pointer.press,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
            **common,
        ),
        Tool(
            name="browser.wait_for",
            title="Wait for text or an element",
            description="Wait until a text, or the element a ref names, is visible.",
            input_model=looking.WaitForInput,
            handler=looking.wait_for,
            annotations=read,
            max_output_bytes=16 * 1024,
            long_running=True,
            **common,
        ),
        Tool(
            name="browser.screenshot",
            title="Take a screenshot",
            description="A PNG of the visible page, kept as an artifact of the task.",
            input_model=looking.ScreenshotInput,
            handler=looking.screenshot,
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
            navigating.HistoryInput,
            navigating.navigate_back,
        ),
        acting(
            "browser.navigate_forward",
            "Go forward",
            "Go forward one page in the current page's history; the answer carries its snapshot.",
            navigating.HistoryInput,
            navigating.navigate_forward,
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
