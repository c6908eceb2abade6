"""Playwright's errors in the gateway's words: the one place they are mapped.

Every browser operation of a task runs through `BrowserSession.run`, which maps what
Playwright raised here: a timeout is `timeout` (retryable), a closed or crashed target is
`unavailable`/`browser_unavailable` (retryable, and the session is lost), anything else is
`failed`/`handler_error` with Playwright's first line, never its call log.
"""

from __future__ import annotations

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from gateway.errors import ToolFailure
from gateway.results import ErrorCode, ToolStatus

MESSAGE_CHARS = 300


def browser_unavailable(message: str) -> ToolFailure:
    return ToolFailure(
        ToolStatus.UNAVAILABLE, ErrorCode.BROWSER_UNAVAILABLE, message, retryable=True
    )


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
    return ToolFailure(ToolStatus.FAILED, ErrorCode.HANDLER_ERROR, message)
