"""What one node knows of its tasks' owners: the tasks it holds (with their epoch), the
owner it believes each other task has (and since when), the newest epoch heard of per task,
and the tasks it took from a node that had opened their browser context.

Tables only: the ledger (PostgreSQL) says who owns a task; these say what this node last
heard, so that most calls are routed without asking it. The time is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# How long another node's ownership is believed without asking the database again; a
# stale belief costs one extra hop (the old owner says it is not the owner).
BELIEVED_S = 2.0
# Tasks whose newest owner epoch is remembered.
NEWEST_EPOCHS = 10_000

BROWSER_LOST = (
    "the task's browser context was on another gateway node, which no longer holds the "
    "task; it is lost, and the next call gets a new one"
)


@dataclass(frozen=True)
class Owner:
    """A task's owner as the ledger has it: `node_id` None when nobody holds it."""

    node_id: str | None
    epoch: int
    revoked: bool
    # Set by a claim that took the task from a node that had opened its browser context.
    browser_lost: bool = False


@dataclass(frozen=True)
class Freed:
    """A task whose owner was let go: nobody holds it now, from `epoch` on."""

    task_id: str
    epoch: int


class Owners:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._mine: dict[str, int] = {}
        self._others: dict[str, tuple[Owner, float]] = {}
        # The newest epoch heard of per task: a claim answered after a newer one was heard
        # of is not taken up.
        self._newest: OrderedDict[str, int] = OrderedDict()
        # Tasks taken from a node that had opened their browser context: told once.
        self._browser_moved: dict[str, str] = {}

    def held(self) -> dict[str, int]:
        """The tasks this node holds, and their epoch."""
        return dict(self._mine)

    def epoch(self, task_id: str) -> int | None:
        """The epoch this node holds the task under; None when it does not hold it."""
        return self._mine.get(task_id)

    def describe(self, task_id: str) -> dict[str, Any]:
        """Where the task lives, as this node knows it."""
        if task_id in self._mine:
            return {"node_id": self.node_id, "owner": self.node_id, "epoch": self._mine[task_id]}
        believed = self._others.get(task_id)
        owner = believed[0] if believed is not None else None
        return {
            "node_id": self.node_id,
            "owner": owner.node_id if owner else None,
            "epoch": owner.epoch if owner else None,
        }

    def believed(self, task_id: str, now: float) -> Owner | None:
        """The owner another node was heard to be less than `BELIEVED_S` ago."""
        believed = self._others.get(task_id)
        if believed is not None and now - believed[1] < BELIEVED_S:
            return believed[0]
        return None

    def believe(self, task_id: str, owner: Owner, now: float) -> None:
        self._others[task_id] = (owner, now)

    def doubt(self, task_id: str) -> None:
        """What was believed of the task's owner is not: the ledger is asked again."""
        self._others.pop(task_id, None)

    def take(self, task_id: str, owner: Owner) -> bool:
        """This node holds the task at `owner.epoch`; False, and nothing changes, when a
        newer owner was heard of meanwhile (the claim is already past)."""
        if self._newest.get(task_id, 0) > owner.epoch:
            return False
        self.note_epoch(task_id, owner.epoch)
        self._mine[task_id] = owner.epoch
        self._others.pop(task_id, None)
        if owner.browser_lost:
            self._browser_moved[task_id] = BROWSER_LOST
        return True

    def let_go(self, task_id: str) -> bool:
        """This node no longer holds the task; False when it did not."""
        return self._mine.pop(task_id, None) is not None

    def heard(self, task_id: str, node: str | None, epoch: int, now: float) -> bool:
        """Another node said the task is `node`'s (None: nobody's) from `epoch` on; True
        when this node held it under an older epoch and must let go."""
        if node == self.node_id:
            return False  # its own message, or one about a claim of its own
        self.note_epoch(task_id, epoch)
        if node is not None:
            self._others[task_id] = (Owner(node, epoch, False), now)
        else:
            self._others.pop(task_id, None)
        mine = self._mine.get(task_id)
        return mine is not None and epoch > mine

    def ended(self, task_id: str) -> None:
        """The task ended: nobody holds it."""
        self._mine.pop(task_id, None)
        self._others.pop(task_id, None)

    def note_epoch(self, task_id: str, epoch: int) -> None:
        if epoch > self._newest.get(task_id, 0):
            self._newest[task_id] = epoch
            self._newest.move_to_end(task_id)
            while len(self._newest) > NEWEST_EPOCHS:
                self._newest.popitem(last=False)

    def browser_moved(self, task_id: str) -> str | None:
        """Why the task's browser context is gone, once."""
        return self._browser_moved.pop(task_id, None)
