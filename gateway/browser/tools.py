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
from gateway.parts import BrowserToolsConfig

from . import forms, looking, navigating, pages, pointer
from .acting import with_limits

SCOPE = "browser"


def tools(config: BrowserToolsConfig) -> list[Tool]:
    """The browser tools, bounded for this gateway's snapshot size."""
    snapshot_bytes = max(64 * 1024, config.snapshot_max_chars * 4 + 4096)
    read = ToolAnnotations(read_only_hint=True, untrusted_content_hint=True)
    act = ToolAnnotations(untrusted_content_hint=True)
    common: dict[str, Any] = {"scopes": frozenset({SCOPE}), "timeout_s": 60.0}

    def tool(
        name: str,
        title: str,
        description: str,
        model: type[BaseModel],
        handler: Handler,
        **fields: Any,
    ) -> Tool:
        """A browser tool: every one has the scope and the deadline in `common`."""
        return Tool(
            name=name,
            title=title,
            description=description,
            input_model=model,
            handler=handler,
            **fields,
            **common,
        )

    def acting(
        name: str, title: str, description: str, model: type[BaseModel], handler: Handler
    ) -> Tool:
        """A tool that acts on the page and answers with what changed, or a snapshot."""
        return tool(
            name,
            title,
            description,
            model,
            handler,
            annotations=act,
            side_effects=True,
            max_output_bytes=snapshot_bytes + 4096,
        )

    changed = " The answer says what changed on the page."
    return [
        tool(
            "browser.navigate",
            "Open a page",
            "Open a URL of the task's sandbox app in the task's own browser; the "
            "answer carries the loaded page's snapshot with element refs, as "
            "browser.snapshot's does (unless snapshot is false).",
            navigating.NavigateInput,
            navigating.navigate,
            annotations=act,
            max_output_bytes=snapshot_bytes + 4096,
        ),
        tool(
            "browser.snapshot",
            "Read the page",
            "An accessibility snapshot of the current page with element refs, "
            "bounded (a cut one says how to narrow it); narrow it to an element (ref), an "
            "ARIA role and name, or a depth.",
            looking.SnapshotInput,
            looking.snapshot,
            annotations=read,
            max_output_bytes=snapshot_bytes,
        ),
        acting(
            "browser.click",
            "Click an element",
            "Click the element a ref names. The answer says what changed on "
            "the page; after a navigation, the new page's title and outline (browser.snapshot "
            "or snapshot true for the whole page).",
            pointer.ClickInput,
            pointer.click,
        ),
        acting(
            "browser.fill",
            "Fill a field",
            "Replace the value of the text field a ref names; the answer says "
            "what changed on the page.",
            forms.FillInput,
            forms.fill,
        ),
        acting(
            "browser.press",
            "Press a key",
            "Press a key, on the element a ref names or on the focused one.",
            pointer.PressInput,
            pointer.press,
        ),
        tool(
            "browser.wait_for",
            "Wait for text or an element",
            "Wait until a text, or the element a ref names, is visible.",
            looking.WaitForInput,
            looking.wait_for,
            annotations=read,
            max_output_bytes=16 * 1024,
            long_running=True,
        ),
        tool(
            "browser.screenshot",
            "Take a screenshot",
            "A PNG of the visible page, kept as an artifact of the task.",
            looking.ScreenshotInput,
            looking.screenshot,
            annotations=ToolAnnotations(read_only_hint=True),
            max_output_bytes=16 * 1024,
        ),
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
        tool(
            "browser.console",
            "Read the console",
            "The pages' console messages and uncaught errors, numbered; "
            "`since` a number an earlier answer gave as `last`. Bounded and redacted.",
            pages.SignalsInput,
            pages.console,
            annotations=read,
            max_output_bytes=256 * 1024,
        ),
        tool(
            "browser.network",
            "Read the network",
            "The responses the pages received from the task's origins "
            "(method, URL without query values, status, type), numbered; `since` a number "
            "an earlier answer gave as `last`.",
            pages.SignalsInput,
            pages.network,
            annotations=read,
            max_output_bytes=256 * 1024,
        ),
    ]


def bounded_tools(config: BrowserToolsConfig) -> list[Tool]:
    """The tools, each run with this gateway's upload and download bounds."""
    return [replace(tool, handler=with_limits(config, tool.handler)) for tool in tools(config)]


def register(registry: Registry, config: BrowserToolsConfig) -> None:
    for tool in bounded_tools(config):
        registry.add(tool)
