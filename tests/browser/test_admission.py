"""The admission of browser actions on its own, with a fake clock: its estimate of a call's
wait, when it turns a call away, and the order in which it hands slots over. (What a
caller sees of it with a real Chromium is in test_overload.py.)"""

from __future__ import annotations

import asyncio

import pytest

from gateway.browser.admission import FIRST_GUESS_S, RECENT_WEIGHT, RUN_MARGIN_S, Admission
from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _queued(admission: Admission, count: int) -> None:
    """Let waiting calls reach the queue (they join within a few turns of the loop)."""
    for _ in range(100):
        if admission.queued == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{admission.queued} calls wait, not {count}")


def _overloaded(exc: pytest.ExceptionInfo[ToolFailure]) -> int:
    failure = exc.value
    assert failure.tool_status is ToolStatus.UNAVAILABLE
    assert failure.code == ErrorCode.OVERLOADED
    assert failure.retryable
    assert failure.details is not None
    retry_after: int = failure.details["retry_after_s"]
    return retry_after


def test_the_estimate_lays_the_work_ahead_over_the_slots() -> None:
    admission = Admission(2, clock=FakeClock())
    assert admission.expected_wait() == 0.0  # a slot is free
    admission.running = 2
    # Both slots held, each for an action: the first frees one action from now.
    assert admission.expected_wait() == pytest.approx(FIRST_GUESS_S)
    admission.release(1.0)  # the first measure replaces the guess
    assert admission.average_s == pytest.approx(1.0)
    admission.release(2.0)  # then each one moves the running average a little
    assert admission.average_s == pytest.approx(1.0 + RECENT_WEIGHT * 1.0)
    admission.running = 2
    # Behind 3 waiting calls on 2 slots: 4 actions to go before its turn, 2 per slot; a
    # call that says no cost is weighed at the slowest recent action (2 s), not the average.
    assert admission.slowest_s() == pytest.approx(2.0)
    assert admission.expected_wait(ahead=3) == pytest.approx(4 / 2 * 2.0)
    wait = admission.expected_wait(ahead=3)
    assert admission.fits(wait, wait + 2.0 + RUN_MARGIN_S)
    assert not admission.fits(wait, wait + 2.0)


async def test_a_call_that_could_not_run_before_its_deadline_is_turned_away_at_once() -> None:
    clock = FakeClock()
    shed: list[int] = []
    admission = Admission(1, clock=clock, on_shed=lambda: shed.append(1))
    assert await admission.acquire(1.0) == 0.0
    admission.release(4.0)  # actions take 4 s here
    assert await admission.acquire(1.0) == 0.0  # a free slot: no wait to weigh
    # One runs: the next call's turn is about 4 s away, its action 4 s more.
    with pytest.raises(ToolFailure) as refused:
        await admission.acquire(8.0)
    assert _overloaded(refused) == 4  # the expected wait, rounded up
    assert shed == [1] and admission.shed == 1
    assert admission.queued == 0 and admission.running == 1  # it took nothing
    # With the time for both, it waits its turn and gets the slot handed over.
    waiter = asyncio.ensure_future(admission.acquire(8.0 + RUN_MARGIN_S))
    await _queued(admission, 1)
    clock.now += 3.0
    admission.release(4.0)
    assert await waiter == pytest.approx(3.0)  # seconds it waited, on the fake clock
    assert admission.running == 1 and admission.queued == 0


async def test_the_queue_is_bounded_and_the_retry_hint_grows_with_it() -> None:
    admission = Admission(1, max_waiting=3, clock=FakeClock())
    await admission.acquire()
    admission.release(1.0)
    await admission.acquire()
    waiters = [asyncio.ensure_future(admission.acquire()) for _ in range(3)]
    await _queued(admission, 3)
    # However long its deadline: 3 wait already, and each is an action to wait for.
    with pytest.raises(ToolFailure) as refused:
        await admission.acquire(3600.0)
    assert _overloaded(refused) == 4
    for waiter in waiters:
        admission.release(1.0)
        await waiter
    admission.release(1.0)
    assert admission.running == 0 and admission.queued == 0
    assert admission.shed == 1


async def test_slots_go_in_arrival_order_and_a_caller_gone_passes_its_turn_on() -> None:
    admission = Admission(1, max_waiting=3, clock=FakeClock())
    await admission.acquire()
    order: list[str] = []

    async def call(name: str) -> None:
        await admission.acquire()
        order.append(name)

    first, second, third = (asyncio.ensure_future(call(n)) for n in ("first", "second", "third"))
    await _queued(admission, 3)
    # The slot is handed to the first as its caller goes away: the second gets it instead.
    admission.release(0.1)
    first.cancel()
    await asyncio.sleep(0)
    await second
    assert order == ["second"]
    admission.release(0.1)
    await third
    admission.release(0.1)
    assert order == ["second", "third"]
    assert admission.running == 0 and admission.queued == 0
    assert first.cancelled()


async def test_a_waiting_call_leaves_the_queue_when_its_deadline_comes_too_close() -> None:
    clock = FakeClock()
    admission = Admission(1, clock=clock)
    await admission.acquire()
    admission.release(0.01)
    await admission.acquire()
    # Time for its turn and its action at first: it waits...
    waiter = asyncio.ensure_future(admission.acquire(0.3))
    await _queued(admission, 1)
    # ...but the slot does not come, and its deadline draws near: it leaves, overloaded,
    # rather than waiting to time out.
    clock.now += 1.0
    with pytest.raises(ToolFailure) as refused:
        await waiter
    assert _overloaded(refused) >= 1
    assert admission.queued == 0 and admission.running == 1
    admission.release(0.01)
    assert admission.running == 0


async def test_a_burst_that_fits_its_deadlines_waits_however_many_come() -> None:
    admission = Admission(1, clock=FakeClock())
    await admission.acquire()
    admission.release(0.5)  # actions take 0.5 s here
    await admission.acquire()
    # Twenty calls at once, each with a minute: twenty actions ahead of the last is 10 s.
    burst = [asyncio.ensure_future(admission.acquire(60.0)) for _ in range(20)]
    await _queued(admission, 20)
    assert admission.shed == 0
    for turn in burst:
        admission.release(0.5)
        await turn
    admission.release(0.5)
    assert admission.running == 0 and admission.queued == 0 and admission.shed == 0


async def test_the_wait_is_the_work_ahead_at_each_call_s_own_cost() -> None:
    admission = Admission(1, clock=FakeClock())
    await admission.acquire()
    admission.release(0.1)
    # A heavy page's 4 s action holds the slot; two more of them wait.
    await admission.acquire(cost_s=4.0)
    heavy = [asyncio.ensure_future(admission.acquire(60.0, cost_s=4.0)) for _ in range(2)]
    await _queued(admission, 2)
    assert admission.expected_wait() == pytest.approx(12.0)
    # A light call with 10 s: 12 s of work is ahead of it. Out at once, nothing taken.
    with pytest.raises(ToolFailure) as refused:
        await admission.acquire(10.0, cost_s=0.1)
    assert _overloaded(refused) == 12
    assert admission.queued == 2 and admission.running == 1 and admission.shed == 1
    # With time for the work ahead and its own, the same call waits.
    light = asyncio.ensure_future(admission.acquire(12.0 + 0.1 + RUN_MARGIN_S, cost_s=0.1))
    await _queued(admission, 3)
    for turn in (*heavy, light):
        admission.release(4.0)
        await turn
    admission.release(0.1)
    assert admission.running == 0 and admission.queued == 0 and admission.shed == 1
