"""Admission of work to a resource that serves a few calls at once: a few run, the others
wait their turn, and a call that would not get its turn in time is told so at once.

A resource shared by many calls (a Chromium process's cores, a dashboard tab's event loop)
only gets slower past a few at once, and a queue without a bound turns a quick answer into
one after a minute. So each such resource has one `Admission`:

- at most `slots` calls hold it at once; the others wait in the order they came (FIFO: a
  slot that frees goes to the first);
- a call's wait is predicted from the work already ahead of it: each call holding a slot
  and each call waiting, at its own cost, laid out over the slots in the order they will
  get them (nothing while a slot is free and no one waits). A caller that knows what its
  call costs (`cost_s`: a page's slowest recent actions) says so, and the call is weighed
  at that cost, by itself and by the calls behind it; a call that does not is weighed at
  `unknown_cost` (the running average here; a resource may ask for more);
- a call waits when that wait and its own hold fit in the time its deadline leaves it;
  otherwise it ends at once, `unavailable`/`overloaded`, retryable, with
  `details.retry_after_s` (the predicted wait, rounded up, at least 1 s). `max_waiting`,
  when given, also bounds how many may wait at once (None: the deadline alone decides);
- a call that waits and whose deadline comes too close to still be served leaves the
  queue the same way, rather than timing out later.

A call turned away never reached the resource: nothing of it is half done. Who uses it,
with which numbers: the task browser (`gateway/browser/admission.py`, per Chromium process)
and the tab channel (`gateway/tabs/hub.py`, per dashboard tab).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus

# Weight of the newest hold in the running average: it follows a change of load within a
# few calls, and one slow call does not set it alone.
RECENT_WEIGHT = 0.2
# Holds kept to know the slowest recent ones (`slowest_s`).
RECENT_HOLDS = 32


class Admission:
    """The slots of one resource, and its queue.

    `first_guess_s`: the hold assumed until one is measured. `run_margin_s`: what a call
    does besides its hold once admitted (its evidence, its answer); a call that cannot keep
    this much before its deadline does not start. `what` and `unit` name the resource and
    its calls in the refusal ("the task browser", "actions").
    """

    def __init__(
        self,
        slots: int,
        *,
        max_waiting: int | None,
        first_guess_s: float,
        run_margin_s: float,
        what: str,
        unit: str,
        clock: Callable[[], float] = time.monotonic,
        on_shed: Callable[[], None] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError("an admission needs at least one slot")
        self.slots = slots
        self.max_waiting = max_waiting
        self.run_margin_s = run_margin_s
        self.what = what
        self.unit = unit
        self.clock = clock
        self.on_shed = on_shed
        self.running = 0
        self.average_s = first_guess_s
        self.measured = 0  # holds whose duration went into the average
        self.shed = 0  # calls turned away
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._costs: dict[asyncio.Future[None], float] = {}  # of waiting calls that said
        self._recent: deque[float] = deque(maxlen=RECENT_HOLDS)
        # The calls holding a slot: when each got it, and its cost when it said one.
        self._holding: list[tuple[float, float | None]] = []

    @property
    def queued(self) -> int:
        """Calls waiting for a slot now."""
        return len(self._waiting)

    @property
    def idle(self) -> bool:
        """No call holds a slot or waits for one."""
        return self.running == 0 and not self._waiting

    def slowest_s(self) -> float:
        """The slowest of the recent holds (the first guess before any)."""
        return max(self._recent, default=self.average_s)

    def unknown_cost(self) -> float:
        """What a call that does not say its cost is expected to hold its slot."""
        return self.average_s

    def cost(self, cost_s: float | None) -> float:
        """What a call is expected to hold its slot: its own cost when it is known and more
        than the average, else `unknown_cost`."""
        return self.unknown_cost() if cost_s is None else max(self.average_s, cost_s)

    def expected_wait(self, ahead: int | None = None) -> float:
        """Seconds a call that joins now (behind `ahead` waiting calls: all of them when
        None; more than wait now count at `unknown_cost`) can expect to wait for its slot."""
        ahead = len(self._waiting) if ahead is None else ahead
        if ahead == 0 and self.running < self.slots:
            return 0.0
        # When each slot frees: a call holding one is counted at its whole cost (how far
        # along it is says little of when it ends), a slot held by a call that was never
        # recorded (`running` set from outside) at `unknown_cost`, a free slot now.
        held = [self.cost(cost_s) for _, cost_s in self._holding[: self.running]]
        held += [self.unknown_cost()] * (self.running - len(held))
        frees = sorted(held + [0.0] * max(0, self.slots - self.running))[: self.slots]
        queued = list(self._waiting)[:ahead]
        costs = [self.cost(self._costs.get(turn)) for turn in queued]
        costs += [self.unknown_cost()] * (ahead - len(queued))
        # Each call ahead takes the slot that frees first, in turn (FIFO), and holds it its
        # cost; this call gets the first slot to free after all of them.
        heapq.heapify(frees)
        for cost in costs:
            heapq.heappush(frees, heapq.heappop(frees) + cost)
        return frees[0]

    def fits(self, wait: float, time_left: float, cost_s: float | None = None) -> bool:
        """Whether a call that waits `wait` (and holds its slot `cost_s`, when it knows)
        still has time to be served before its deadline."""
        return wait + self.cost(cost_s) + self.run_margin_s <= time_left

    def try_acquire(self) -> bool:
        """Take a free slot if there is one and no one waits for it (no await, no deadline
        to weigh); the caller must `release` it."""
        if self.running < self.slots and not self._waiting:
            self.running += 1
            self._holding.append((self.clock(), None))
            return True
        return False

    async def acquire(self, time_left: float = math.inf, cost_s: float | None = None) -> float:
        """Take a slot, waiting in line; returns the seconds waited.

        `time_left`: seconds until the call's deadline; `cost_s`: how long the call will
        hold its slot, when the caller knows better than the average. Raises the
        `overloaded` failure, at once, when the call would not get its slot in time; the
        caller must `release` every slot it was given."""
        if self.try_acquire():
            self._holding[-1] = (self._holding[-1][0], cost_s)
            return 0.0
        wait = self.expected_wait()
        full = self.max_waiting is not None and len(self._waiting) >= self.max_waiting
        if full or not self.fits(wait, time_left, cost_s):
            raise self.refuse(wait)
        arrived = self.clock()
        deadline = arrived + time_left
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        if cost_s is not None:
            self._costs[turn] = cost_s
        try:
            while not turn.done():
                # The last moment it can take a slot and still be served in time (moved as
                # the average moves: looked at again each time it comes).
                give_up = deadline - self.cost(cost_s) - self.run_margin_s - self.clock()
                if give_up <= 0:
                    break
                await asyncio.wait([turn], timeout=give_up if math.isfinite(give_up) else None)
        except BaseException:
            self._leave(turn)
            raise
        self._costs.pop(turn, None)
        if turn.done():
            # The slot was handed over, already counted.
            self._holding.append((self.clock(), cost_s))
            return self.clock() - arrived
        self._leave(turn)
        raise self.refuse(self.expected_wait())

    def release(self, held_s: float | None) -> None:
        """Give a slot back after holding it `held_s` seconds; None when the call never
        reached the resource (it says nothing of how long a hold takes)."""
        if held_s is not None:
            if self.measured == 0:
                self.average_s = held_s  # the first measure replaces the guess
            else:
                self.average_s += RECENT_WEIGHT * (held_s - self.average_s)
            self.measured += 1
            self._recent.append(held_s)
        self._forget_hold(held_s)
        self._hand_over()

    def _forget_hold(self, held_s: float | None) -> None:
        # The hold that ends is the one that started `held_s` ago (the oldest when the
        # caller does not say): the others keep counting at their cost.
        if not self._holding:
            return
        now = self.clock()
        if held_s is None:
            index = 0
        else:
            index = min(
                range(len(self._holding)),
                key=lambda i: abs(now - self._holding[i][0] - held_s),
            )
        del self._holding[index]

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
        self._costs.pop(turn, None)

    def refuse(self, wait: float) -> ToolFailure:
        """The `overloaded` failure of a call turned away, counted as shed; `wait`: what it
        could expect to wait, which its retry hint names."""
        self.shed += 1
        if self.on_shed is not None:
            self.on_shed()
        retry_after = max(1, math.ceil(wait))
        return ToolFailure(
            ToolStatus.UNAVAILABLE,
            ErrorCode.OVERLOADED,
            f"{self.what} is overloaded ({self.running} {self.unit} running, "
            f"{len(self._waiting)} waiting for {self.slots} slots); nothing was done",
            retryable=True,
            details={"retry_after_s": retry_after},
        )
