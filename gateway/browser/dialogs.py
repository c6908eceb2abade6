"""A dialog a task's page opened (alert, confirm, prompt, beforeunload), waiting for an answer.

A dialog holds its page: nothing runs there until it is answered. So one is never left
open: the call whose action opened it answers at once with what the page asked, and
`browser.handle_dialog` accepts or dismisses it; one nobody answers within
`DIALOG_TIMEOUT_S`, or still open when the task's next call starts, is dismissed and
recorded (`dialog_dismissed`). A page that keeps opening them gets its dialogs dismissed at
once past `MAX_DIALOGS_PER_DOCUMENT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playwright.async_api import Dialog

DIALOG_TIMEOUT_S = 30.0
MAX_DIALOGS_PER_DOCUMENT = 20
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
