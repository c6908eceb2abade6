"""Admission of browser actions to one Chromium process: a few run at once, the others
wait their turn, and a call that would not get its turn in time is told so at once.

A Chromium process shares a few cores between every page it renders: past a few actions at
once each one only gets slower, and a queue without a bound turned actions of a tenth of a
second into replies after a minute (a stress run: MCP calls at 2.1 s p50, 57 s p99). So
each process of the pool has one `Admission`:

- at most `slots` actions (a tool's `BrowserSession.run`, a screenshot) hold it at once;
  the others wait in the order they came (FIFO: a slot that frees goes to the first);
- a call can expect to wait (calls waiting ahead of it + 1) / slots x the running average
  of recent actions' durations (nothing while a slot is free and no one waits);
- it ends at once, `unavailable`/`overloaded`, retryable, with `details.retry_after_s`
  (that expected wait, rounded up, at least 1 s), when the wait and one action more do
  not fit in the time its deadline leaves it, or when `max_waiting` calls wait already;
- a call that waits and whose deadline comes too close to still run its action leaves the
  queue the same way, rather than timing out later.

A call turned away never reached the page: nothing of it is half done.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

from gateway.errors import ToolFailure
from gateway.results import ErrorCode, ToolStatus

# Calls that may wait per slot, unless told (`browser_waiting_per_slot`). Bounding the
# queue is what bounds an admitted call's latency (its deadline alone would let calls wait
# a minute): with one waiting per slot a call expects at most one action's time before its
# own. Measured with bench.overload (one
# slot, calls offered at twice what it serves, 2 cores): admitted p99 2.3x the idle p99
# with one waiting per slot, 3.7x with two.
WAITING_PER_SLOT = 1
# The guess for an action's duration until one is measured (a navigate with its snapshot
# on an idle 2-core machine: 40 to 120 ms; a loaded one several times that).
FIRST_GUESS_S = 0.5
# Weight of the newest duration in the running average: it follows a change of load within
# a few actions, and one slow page does not set it alone.
RECENT_WEIGHT = 0.2
# What a call does besides its action once admitted (the guard's settle, its evidence and
# answer): a call that cannot keep this much before its deadline does not start.
RUN_MARGIN_S = 0.25


class Admission:
    """The action slots of one Chromium process, and its queue."""

    def __init__(
        self,
        slots: int,
        *,
        max_waiting: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_shed: Callable[[], None] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError("an admission needs at least one slot")
        self.slots = slots
        self.max_waiting = slots * WAITING_PER_SLOT if max_waiting is None else max_waiting
        self.clock = clock
        self.on_shed = on_shed
        self.running = 0
        self.average_s = FIRST_GUESS_S
        self.measured = 0  # actions whose duration went into the average
        self.shed = 0  # calls turned away
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def queued(self) -> int:
        """Calls waiting for a slot now."""
        return len(self._waiting)

    def expected_wait(self, ahead: int | None = None) -> float:
        """Seconds a call that joins now (behind `ahead` waiting calls: all of them when
        None) can expect to wait for its slot."""
        ahead = len(self._waiting) if ahead is None else ahead
        if ahead == 0 and self.running < self.slots:
            return 0.0
        # Each slot frees once per action on the average: the call's turn comes after the
        # calls ahead of it and one more action, spread over the slots.
        return (ahead + 1) / self.slots * self.average_s

    def fits(self, wait: float, time_left: float) -> bool:
        """Whether a call that waits `wait` still has time to run before its deadline."""
        return wait + self.average_s + RUN_MARGIN_S <= time_left

    async def acquire(self, time_left: float = math.inf) -> float:
        """Take a slot for one action, waiting in line; returns the seconds waited.

        `time_left`: seconds until the call's deadline. Raises the `overloaded` failure,
        at once, when the call would not get its slot in time; the caller must `release`
        every slot it was given."""
        if self.running < self.slots and not self._waiting:
            self.running += 1
            return 0.0
        wait = self.expected_wait()
        if len(self._waiting) >= self.max_waiting or not self.fits(wait, time_left):
            raise self._refuse(wait)
        arrived = self.clock()
        deadline = arrived + time_left
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            while not turn.done():
                # The last moment it can take a slot and still run its action in time
                # (moved as the average moves: looked at again each time it comes).
                give_up = deadline - self.average_s - RUN_MARGIN_S - self.clock()
                if give_up <= 0:
                    break
                await asyncio.wait([turn], timeout=give_up if math.isfinite(give_up) else None)
        except BaseException:
            self._leave(turn)
            raise
        if turn.done():
            return self.clock() - arrived  # the slot was handed over, already counted
        self._leave(turn)
        raise self._refuse(self.expected_wait())

    def release(self, held_s: float) -> None:
        """Give a slot back after an action that held it `held_s` seconds."""
        if self.measured == 0:
            self.average_s = held_s  # the first measure replaces the guess
        else:
            self.average_s += RECENT_WEIGHT * (held_s - self.average_s)
        self.measured += 1
        self._hand_over()

    def _hand_over(self) -> None:
        # The freed slot goes straight to the first in line, so a call arriving now cannot
        # take it before those already waiting.
        if self._waiting:
            self._waiting.popleft().set_result(None)
        else:
            self.running -= 1

    def _leave(self, turn: asyncio.Future[None]) -> None:
        if turn.done() and not turn.cancelled():
            self._hand_over()  # its slot came as it gave up: the next one takes it
        else:
            self._waiting.remove(turn)
            turn.cancel()

    def _refuse(self, wait: float) -> ToolFailure:
        self.shed += 1
        if self.on_shed is not None:
            self.on_shed()
        retry_after = max(1, math.ceil(wait))
        return ToolFailure(
            ToolStatus.UNAVAILABLE,
            ErrorCode.OVERLOADED,
            f"the task browser is overloaded ({self.running} actions running, "
            f"{len(self._waiting)} waiting for {self.slots} slots); nothing was done",
            retryable=True,
            details={"retry_after_s": retry_after},
        )
