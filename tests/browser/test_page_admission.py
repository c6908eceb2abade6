"""Admission that knows each page's cost, with a fake clock: a call is weighed at its own
page's slowest recent action, and so are the calls behind it, so an admitted call fits its
deadline rather than timing out behind (or as) a heavy page."""

from __future__ import annotations

import asyncio

import pytest

from gateway.browser.admission import Admission, PageAdmission
from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _hold(page: PageAdmission, seconds: float) -> None:
    await page.acquire()
    page.release(seconds)


async def _pages() -> tuple[Admission, PageAdmission, PageAdmission]:
    """A process whose light page took 0.1 s thirty times, around one 5 s load of a heavy one:
    the running average is back near 0.1 s."""
    shared = Admission(1, max_waiting=4, clock=FakeClock())
    light, heavy = PageAdmission(shared), PageAdmission(shared)
    for _ in range(10):
        await _hold(light, 0.1)
    await _hold(heavy, 5.0)
    for _ in range(20):
        await _hold(light, 0.1)
    assert shared.average_s < 0.2
    return shared, light, heavy


async def test_a_heavy_page_is_turned_away_where_the_average_would_admit_it_to_time_out() -> None:
    shared, light, heavy = await _pages()
    await light.acquire()  # a light page's action runs
    # By the average it would wait 0.1 s and run 0.1 s: it fits 3 s. Its page takes 5 s.
    assert shared.fits(shared.expected_wait(), 3.0, cost_s=shared.average_s)
    with pytest.raises(ToolFailure) as refused:
        await heavy.acquire(3.0)
    assert refused.value.code == ErrorCode.OVERLOADED
    assert shared.queued == 0
    # A light page's call with the same deadline waits its turn as before.
    waiter = asyncio.ensure_future(light.acquire(3.0))
    for _ in range(100):
        if shared.queued:
            break
        await asyncio.sleep(0)
    assert shared.queued == 1
    light.release(0.1)
    assert await waiter == 0.0
    light.release(0.1)


async def test_calls_behind_a_heavy_page_count_its_cost_in_their_wait() -> None:
    shared, light, heavy = await _pages()
    await shared.acquire()
    heavy_turn = asyncio.ensure_future(heavy.acquire(60.0))
    for _ in range(100):
        if shared.queued:
            break
        await asyncio.sleep(0)
    assert shared.queued == 1
    # Behind the heavy page's 5 s, a light call with 3 s left cannot be served in time.
    assert shared.expected_wait() > 5.0
    with pytest.raises(ToolFailure):
        await light.acquire(3.0)
    # With time for it, it waits.
    light_turn = asyncio.ensure_future(light.acquire(60.0))
    for _ in range(100):
        if shared.queued == 2:
            break
        await asyncio.sleep(0)
    assert shared.queued == 2
    shared.release(0.1)
    await heavy_turn
    heavy.release(5.0)
    await light_turn
    light.release(0.1)
    assert shared.running == 0 and shared.queued == 0


async def test_a_page_with_no_action_yet_is_weighed_at_the_process_s_slowest() -> None:
    shared, _light, _heavy = await _pages()
    fresh = PageAdmission(shared)
    assert fresh.cost_s() == pytest.approx(5.0)
    await shared.acquire()
    with pytest.raises(ToolFailure):
        await fresh.acquire(3.0)
    shared.release(0.1)
