"""A dialog a task's page opened, as it waits for its answer, and what the task's browser
keeps between its pages' dialogs (`dialogs.py` shows, answers and dismisses them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Dialog

MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class PendingDialog:
    dialog: Dialog
    opened_at: float

    def public(self) -> dict[str, Any]:
        """What the page asked, as the agent reads it."""
        shown: dict[str, Any] = {
            "type": self.dialog.type,
            "message": self.dialog.message[:MESSAGE_CHARS],
        }
        if self.dialog.type == "prompt":
            shown["default_value"] = self.dialog.default_value[:MESSAGE_CHARS]
        return shown


@dataclass
class DialogState:
    """What the session's dialog handling keeps between a page's dialogs."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    on_document: int = 0
    # The call under way (if any), and whether its answer can show a dialog.
    in_call: bool = False
    aware: bool = False
    dismissed_leaving: int = 0
