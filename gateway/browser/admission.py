"""Admission of browser actions to one Chromium process: a few run at once, the others
wait their turn, and a call that would not get its turn in time is told so at once.

A Chromium process shares a few cores between every page it renders: past a few actions at
once each one only gets slower, and a queue without a bound turned actions of a tenth of a
second into replies after a minute (a stress run: MCP calls at 2.1 s p50, 57 s p99). So
each process of the pool has one `Admission` (the rules are `gateway/core/admission.py`'s,
shared with the tab channel; the numbers below are the browser's):

- at most `slots` actions (a tool's `BrowserSession.run`, a screenshot) hold it at once;
  the others wait in the order they came;
- a call waits when the work already ahead of it (the actions running and those waiting,
  each at its page's cost) and its own action are predicted to end before its deadline;
  otherwise it ends at once, `unavailable`/`overloaded`, retryable, with
  `details.retry_after_s`, untouched. A waiting call whose deadline comes too close all
  the same (an action ahead ran past its cost) leaves the same way rather than time out.

The queue has no bound of its own unless one is set (`browser_waiting_per_slot`): the
deadline is the bound. A bound by count turned a burst of tasks acting at once into
retries that all could have been served in time (at 8 sessions, navigate p99 10.5 s on a
light page, 48.6 s on a heavy one, nearly all of it the client's retry after `overloaded`).

Each page weighs its calls at its own cost (`PageAdmission`): the slowest of its recent
actions, or, before it has any, the slowest recent action of its process (a call that says
no cost is weighed at that slowest too, never at an average). A running average admitted a
heavy page's call after a run of light ones where it would not finish in time (a stress
run: 68 admitted calls timed out), and the calls behind it with it.

A call turned away never reached the page: nothing of it is half done.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from gateway.core import admission
from gateway.core.admission import RECENT_WEIGHT

# Calls that may wait per slot, unless told (`browser_waiting_per_slot`); None: as many as
# the deadline rule lets wait. A bound trades served calls for a shorter admitted tail
# under steady overload (bench.overload, one slot, calls offered at twice what it serves,
# 2 cores: admitted p99 2.3x the idle p99 with one waiting per slot, 3.7x with two).
WAITING_PER_SLOT: int | None = None
# The guess for an action's duration until one is measured (a navigate with its snapshot
# on an idle 2-core machine: 40 to 120 ms; a loaded one several times that).
FIRST_GUESS_S = 0.5
# What a call does besides its action once admitted (the guard's settle, its evidence and
# answer): a call that cannot keep this much before its deadline does not start.
RUN_MARGIN_S = 0.25
# A page's own actions kept to know its slowest.
PAGE_HOLDS = 8
# The guess for a task start (its context opened and its first call run) until one is
# measured: a cold start with its first navigate on an idle 2-core machine is 0.3 to 0.6 s.
START_GUESS_S = 1.0

__all__ = [
    "FIRST_GUESS_S",
    "RECENT_WEIGHT",
    "RUN_MARGIN_S",
    "START_GUESS_S",
    "WAITING_PER_SLOT",
    "ActionSlots",
    "Admission",
    "PageAdmission",
    "task_starts",
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
        first_guess_s: float = FIRST_GUESS_S,
        unit: str = "actions",
    ) -> None:
        super().__init__(
            slots,
            max_waiting=(
                max_waiting
                if max_waiting is not None
                else None
                if WAITING_PER_SLOT is None
                else slots * WAITING_PER_SLOT
            ),
            first_guess_s=first_guess_s,
            run_margin_s=RUN_MARGIN_S,
            what="the task browser",
            unit=unit,
            clock=clock,
            on_shed=on_shed,
        )

    def unknown_cost(self) -> float:
        # A page's action is as slow as the slowest recent one until it says otherwise: an
        # average let calls in that then timed out behind a heavy page.
        return self.slowest_s()


def task_starts(slots: int, on_shed: Callable[[], None] | None = None) -> Admission:
    """The admission of task starts (a context opened, then the task's first call, which
    starts its renderer and loads its first page): `slots` at once, each weighed at the
    slowest recent start, so a task whose first call would not start in time is told so
    at once instead of timing out in line (a stress run of 64 tasks starting together: 70
    first navigates and 23 first snapshots waited in line past their 60 s)."""
    return Admission(slots, first_guess_s=START_GUESS_S, unit="task starts", on_shed=on_shed)


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
