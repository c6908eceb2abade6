"""What a task's pages say as it happens: console messages and uncaught errors.

Each goes to the pages' signals (`signals.py`, for `browser.console`) and, when it is an
error or a warning, to the task's log, which its agent's client reads as it happens: so
the values typed as secrets or given in the task's storage state are taken out first.
"""

from __future__ import annotations

from playwright.async_api import ConsoleMessage
from playwright.async_api import Error as PlaywrightError

from gateway.core.tasks.log import Level

from .session_state import SessionState

LOG_TEXT_CHARS = 2000


def console(session: SessionState, message: ConsoleMessage) -> None:
    session.signals.console(message, session.typed_secrets | session.state_secrets)
    if session.identity is not None and message.type in ("error", "warning"):
        level: Level = "error" if message.type == "error" else "warning"
        session.sink.log(
            session.identity.task_id,
            level,
            "browser.console",
            {"text": unsecret(session, message.text)[:LOG_TEXT_CHARS], "page": session.url[:512]},
        )


def page_error(session: SessionState, error: PlaywrightError) -> None:
    session.signals.page_error(
        str(error), session.url, session.typed_secrets | session.state_secrets
    )
    if session.identity is not None:
        session.sink.log(
            session.identity.task_id,
            "error",
            "browser.page",
            {"error": unsecret(session, str(error))[:LOG_TEXT_CHARS], "page": session.url[:512]},
        )


def unsecret(session: SessionState, text: str) -> str:
    """`text` without the values typed as secrets or given in the task's storage
    state: the task's log goes to its agent's client as it happens."""
    for value in session.typed_secrets | session.state_secrets:
        if value:
            text = text.replace(value, "[secret]")
    return text
