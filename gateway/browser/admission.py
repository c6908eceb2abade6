"""Admission of browser actions to one Chromium process: a few run at once, the others
wait their turn, and a call that would not get its turn in time is told so at once.

A Chromium process shares a few cores between every page it renders: past a few actions at
once each one only gets slower, and a queue without a bound turned actions of a tenth of a
second into replies after a minute (a stress run: MCP calls at 2.1 s p50, 57 s p99). So
each process of the pool has one `Admission` (the rules are `gateway/admission.py`'s,
shared with the tab channel; the numbers below are the browser's):

- at most `slots` actions (a tool's `BrowserSession.run`, a screenshot) hold it at once;
  the others wait in the order they came;
- a call ends at once, `unavailable`/`overloaded`, retryable, with `details.retry_after_s`,
  when its wait and its own action do not fit in the time its deadline leaves it, or when
  `max_waiting` calls wait already; a waiting call whose deadline comes too close leaves.

Each page weighs its calls at its own cost (`PageAdmission`): the slowest of its recent
actions, or, before it has any, the slowest recent action of its process. A running
average admitted a heavy page's call after a run of light ones where it would not finish
in time (a stress run: 68 admitted calls timed out), and the calls behind it with it.

A call turned away never reached the page: nothing of it is half done.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from gateway import admission
from gateway.admission import RECENT_WEIGHT

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
# What a call does besides its action once admitted (the guard's settle, its evidence and
# answer): a call that cannot keep this much before its deadline does not start.
RUN_MARGIN_S = 0.25
# A page's own actions kept to know its slowest.
PAGE_HOLDS = 8

__all__ = [
    "FIRST_GUESS_S",
    "RECENT_WEIGHT",
    "RUN_MARGIN_S",
    "WAITING_PER_SLOT",
    "ActionSlots",
    "Admission",
    "PageAdmission",
]


class Admission(admission.Admission):
    """The action slots of one Chromium process, and its queue."""

    def __init__(
        self,
        slots: int,
        *,
        max_waiting: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_shed: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(
            slots,
            max_waiting=slots * WAITING_PER_SLOT if max_waiting is None else max_waiting,
            first_guess_s=FIRST_GUESS_S,
            run_margin_s=RUN_MARGIN_S,
            what="the task browser",
            unit="actions",
            clock=clock,
            on_shed=on_shed,
        )


class ActionSlots(Protocol):
    """What a page's session needs of an admission: a slot for each action."""

    async def acquire(self, time_left: float = math.inf) -> float: ...

    def release(self, held_s: float | None) -> None: ...


class PageAdmission:
    """One page's calls to its process's `Admission`, each weighed at the page's own cost:
    the slowest of its last `PAGE_HOLDS` actions (a page that loads for seconds is known
    as one), or the process's slowest recent action while the page has none."""

    def __init__(self, shared: Admission) -> None:
        self.shared = shared
        self._holds: deque[float] = deque(maxlen=PAGE_HOLDS)

    def cost_s(self) -> float:
        return max(self._holds, default=self.shared.slowest_s())

    async def acquire(self, time_left: float = math.inf) -> float:
        return await self.shared.acquire(time_left, cost_s=self.cost_s())

    def release(self, held_s: float | None) -> None:
        if held_s is not None:
            self._holds.append(held_s)
        self.shared.release(held_s)
