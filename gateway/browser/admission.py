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
  when its wait and one action more do not fit in the time its deadline leaves it, or when
  `max_waiting` calls wait already; a waiting call whose deadline comes too close leaves.

A call turned away never reached the page: nothing of it is half done.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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

__all__ = ["FIRST_GUESS_S", "RECENT_WEIGHT", "RUN_MARGIN_S", "WAITING_PER_SLOT", "Admission"]


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
