"""Playwright's errors in the gateway's words: the one place they are mapped.

Every browser operation of a task runs through `BrowserSession.run`, which maps what
Playwright raised here: a timeout is `timeout` (retryable), a closed or crashed target is
`unavailable`/`browser_unavailable` (retryable, and the session is lost), an action the
target cannot take (a fill on a file input or a select, a select_option on a text box) is
`failed`/`unsupported` naming the tool to use instead, anything else is
`failed`/`handler_error` with Playwright's first line, never its call log.
"""

from __future__ import annotations

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus

MESSAGE_CHARS = 300

# What Playwright says when an element cannot take an action, and what to use instead.
# Matched on its first line, in this order; the agent reads the right-hand side only.
_UNSUPPORTED = (
    ('Input of type "file" cannot be filled', "a file input takes browser.upload, not fill"),
    (
        'Input of type "checkbox" cannot be filled',
        "a checkbox takes browser.click, not fill",
    ),
    ('Input of type "radio" cannot be filled', "a radio button takes browser.click, not fill"),
    ("cannot be filled", "this input cannot be filled: use browser.click or browser.type"),
    (
        "Element is not a <select> element",
        "only a native select takes browser.select_option: open a custom list with "
        "browser.click and click its option",
    ),
    (
        "Element is not an <input>",
        "this element takes no text: use browser.click, or browser.type on an editor "
        "that has the focus",
    ),
    (
        "Non-multiple file input can only accept single file",
        "this file input takes one file: give browser.upload a single file",
    ),
    (
        "Not a checkbox or radio button",
        "only a checkbox or a radio button can be checked: use browser.click",
    ),
)


def browser_unavailable(message: str) -> ToolFailure:
    return ToolFailure(
        ToolStatus.UNAVAILABLE, ErrorCode.BROWSER_UNAVAILABLE, message, retryable=True
    )


def unsupported(message: str) -> ToolFailure:
    """An action this target cannot take; `message` says what to use instead."""
    return ToolFailure(ToolStatus.FAILED, ErrorCode.UNSUPPORTED, message)


def first_line(exc: PlaywrightError) -> str:
    """Playwright's message without its call log (which can name local paths)."""
    text = exc.message or str(exc)
    return text.splitlines()[0][:MESSAGE_CHARS] if text else "browser error"


def target_gone(exc: PlaywrightError) -> bool:
    """Whether the error says the page, its context or the browser is gone."""
    message = first_line(exc)
    return (
        type(exc).__name__ == "TargetClosedError"
        or "has been closed" in message
        or "crashed" in message
    )


def map_playwright_error(exc: PlaywrightError, *, browser_alive: bool = True) -> ToolFailure:
    message = first_line(exc)
    if isinstance(exc, PlaywrightTimeout):
        return ToolFailure(ToolStatus.TIMEOUT, ErrorCode.TIMEOUT, message, retryable=True)
    if not browser_alive or target_gone(exc):
        return browser_unavailable(f"the task's browser is gone: {message}")
    for said, instead in _UNSUPPORTED:
        if said in message:
            return unsupported(instead)
    return ToolFailure(ToolStatus.FAILED, ErrorCode.HANDLER_ERROR, message)
