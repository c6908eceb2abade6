"""What a snapshot asks of the page before it is read: the password fields' values only
when a text box shows a value, the load-state wait only for a document not yet parsed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from playwright.async_api import Page

from gateway.browser.parsed import ParsedPages
from gateway.browser.snapshot import empty_frames, shows_field_value


def test_only_a_text_box_with_a_value_asks_for_the_fields_values() -> None:
    assert shows_field_value('- textbox "Password" [active] [ref=e3]: hunter2')
    assert shows_field_value('- main [ref=e1]:\n  - textbox [ref=e2]: "a b"')
    assert not shows_field_value('- textbox "Name" [ref=e7]\n- emphasis [ref=e11]: draft')
    assert not shows_field_value("- paragraph [ref=e2]: - textbox is a word here")


def test_empty_frames_without_an_iframe_is_empty() -> None:
    assert empty_frames('- heading "A" [level=1] [ref=e2]\n- button "Save" [ref=e3]') == []
    assert empty_frames("- main [ref=e1]:\n  - iframe [ref=e4]") == ["e4"]


class _Frame:
    def __init__(self, parent: _Frame | None) -> None:
        self.parent_frame = parent


class _Page:
    """The part of a Playwright page `ParsedPages` uses."""

    def __init__(self) -> None:
        self.waits = 0
        self.listeners: dict[str, list[Callable[[Any], None]]] = {}

    def on(self, event: str, listener: Callable[[Any], None]) -> None:
        self.listeners.setdefault(event, []).append(listener)

    def emit(self, event: str, arg: Any) -> None:
        for listener in self.listeners.get(event, []):
            listener(arg)

    async def wait_for_load_state(self, state: str, **options: float) -> None:
        assert state == "domcontentloaded"
        self.waits += 1


@pytest.mark.asyncio(loop_scope="session")
async def test_a_parsed_document_is_not_waited_for_again_until_its_page_navigates() -> None:
    parsed, fake = ParsedPages(), _Page()
    page = cast(Page, fake)
    parsed.watch(page)
    await parsed.wait(page, 1000)
    await parsed.wait(page, 1000)
    assert fake.waits == 1
    main = _Frame(None)
    fake.emit("framenavigated", _Frame(main))  # a frame inside the page: the same document
    await parsed.wait(page, 1000)
    assert fake.waits == 1
    fake.emit("framenavigated", main)  # a new document: waited for once more
    await parsed.wait(page, 1000)
    assert fake.waits == 2
    fake.emit("framenavigated", main)
    fake.emit("domcontentloaded", page)  # its DOMContentLoaded, seen: no wait
    await parsed.wait(page, 1000)
    assert fake.waits == 2
