"""The approvals a task's tab shows to a person, and which answer from the tab counts.

An approval waiting for a person is shown in the tab, and again to every tab that takes
over the channel; an answer must name the task, the tab and the revision of the showing
it answers. The answer itself is judged by the approvals desk (the nonce, the approver,
the expiry): here only whether this tab may give it.
"""

from __future__ import annotations

from typing import Any

from gateway.tabs import frames
from gateway.tabs.effects import Answer, Send


class TabApprovals:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        # Approvals waiting for a person, shown in the tab (again after a reconnect); with
        # the revision each was last shown at, which its answer must name.
        self._approvals: dict[str, dict[str, Any]] = {}
        self._shown_at: dict[str, int] = {}
        # Shown and not yet answered in this showing: its one answer passes the rate limit,
        # as a reply to a pending request does (the gateway bounds how many there are).
        self._unanswered: set[str] = set()

    def ids(self) -> list[str]:
        return list(self._approvals)

    def add(self, shown: dict[str, Any]) -> str:
        self._approvals[shown["id"]] = shown
        return str(shown["id"])

    def remove(self, approval_id: str) -> bool:
        """Take an approval away; False if it was not shown."""
        if self._approvals.pop(approval_id, None) is None:
            return False
        self._shown_at.pop(approval_id, None)
        self._unanswered.discard(approval_id)
        return True

    def clear(self) -> None:
        self._approvals.clear()
        self._shown_at.clear()
        self._unanswered.clear()

    def show(self, conn: str, tab_id: str, revision: int, approval_id: str) -> Send:
        """The frame that shows the approval to connection `conn` at `revision`."""
        self._shown_at[approval_id] = revision
        self._unanswered.add(approval_id)
        frame = frames.approval_request(
            self._approvals[approval_id], self.task_id, tab_id, revision
        )
        return Send(conn, frame)

    def awaits(self, approval_id: Any) -> bool:
        """Whether this showing of the approval has not had its answer yet."""
        return approval_id in self._unanswered

    def answer(self, conn: str, tab_id: str, answer: frames.Approval) -> Answer | tuple[str, str]:
        """The answer to hand to the desk, or why the tab may not give it (a reason and a
        message)."""
        if answer.id not in self._approvals:
            return "unknown_approval", "no approval with this id waits in this tab"
        if answer.task_id != self.task_id:
            return "wrong_task", "the answer names another task"
        if answer.tab_id != tab_id:
            return "wrong_tab", "the answer names another tab"
        if answer.revision != self._shown_at.get(answer.id):
            return "stale_revision", "the answer names another showing of the approval"
        if not self._approvals[answer.id].get("answerable"):
            return "not_answerable", "this approval is not answered in this tab"
        self._unanswered.discard(answer.id)
        return Answer(conn, answer.id, answer.decision, answer.scope, answer.nonce)
