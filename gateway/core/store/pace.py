"""How long a record handed to the store's writer now can expect to wait for its commit.

A call whose evidence could not be stored before its deadline is turned away before it
runs (the pipeline asks `Store.commit_wait`), so the writer keeps running averages of what
a batch's commit takes, whole and per row, and weighs the work queued ahead with them.
"""

from __future__ import annotations

import time

# The guess of a batch's commit time until one is measured, and the weight of the newest
# measure in the running averages (they follow a change of load within a few batches).
FIRST_GUESS_S = 0.005
RECENT_WEIGHT = 0.2


class CommitPace:
    """The writer's measured commits, and the wait they predict."""

    def __init__(self) -> None:
        self.average_s = FIRST_GUESS_S  # a batch's commit, running average
        self.row_s = FIRST_GUESS_S  # a batch's commit per row, running average
        self.measured = 0

    def expected_wait(self, started: float | None, queued: int) -> float:
        """Seconds a record handed over now can expect to wait for its commit: what is
        left of the batch under way (begun at `started`, by time.monotonic(); its average,
        or as long again as it has taken when it is past that: a stalled commit is not near
        its end), then a batch with every one of the `queued` rows ahead of it. Nothing
        when the writer is idle."""
        if started is None and queued <= 0:
            return 0.0
        wait = self.average_s + queued * self.row_s
        if started is not None:
            elapsed = time.monotonic() - started
            wait += max(self.average_s - elapsed, elapsed)
        return wait

    def measure(self, seconds: float, rows: int) -> None:
        """A batch of `rows` took `seconds` to commit."""
        if self.measured == 0:
            self.average_s, self.row_s = seconds, seconds / max(rows, 1)
        else:
            self.average_s += RECENT_WEIGHT * (seconds - self.average_s)
            self.row_s += RECENT_WEIGHT * (seconds / max(rows, 1) - self.row_s)
        self.measured += 1
