"""An agent that fires calls faster than a person answers them cannot pile up requests: a
task has at most `max_pending_approvals_per_task` waiting, and the next call is refused at
once with `denied`/`quota_exceeded`, storing and showing nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.core.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.approvals.test_asking import GRANTABLE, Ran, asked, control, install
from tests.core_fixtures import new_task, started

BURST = 100


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[tuple[Gateway, Ran]]:
    ran = Ran()
    async for gw in started(settings):
        install(gw, ran)
        yield gw, ran


async def test_a_burst_of_calls_leaves_at_most_the_cap_waiting(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    cap = gw.settings.max_pending_approvals_per_task
    assert cap == 16  # the contract's default
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    calls = [
        asyncio.ensure_future(
            gw.pipeline.call(ident, "agents.save_draft", {"text": str(n)}, door=Door.MCP)
        )
        for n in range(BURST)
    ]
    await asked(gw, ident.task_id, cap)
    refused = [c.result() for c in await _settled(calls, BURST - cap)]
    assert len(refused) == BURST - cap
    for result in refused:
        assert (result.status, result.error and result.error.code) == (
            ToolStatus.DENIED,
            ErrorCode.QUOTA_EXCEEDED,
        )
        assert result.error is not None
        assert result.error.details == {
            "quota": "pending_approvals",
            "limit": cap,
            "current": cap,
            "adding": 1,
        }
        assert not result.error.retryable
    assert len(gw.approvals.pending(ident.task_id)) == cap
    assert len(await gw.approvals.listing(ident.task_id)) == cap
    # Once one is answered, the task may ask again.
    first = gw.approvals.pending(ident.task_id)[0]
    await gw.approvals.decide(ident, first.id, control("deny"))
    again = asyncio.ensure_future(
        gw.pipeline.call(ident, "agents.save_draft", {"text": "again"}, door=Door.MCP)
    )
    for _ in range(200):
        if len(await gw.approvals.listing(ident.task_id)) == cap + 1:
            break
        await asyncio.sleep(0.01)
    assert not again.done()
    assert sum(a["status"] == "pending" for a in await gw.approvals.listing(ident.task_id)) == cap
    await gw.tasks.end(ident.task_id)
    await asyncio.gather(again, *calls)
    assert ran.inputs == []


async def test_the_cap_is_per_task(env: tuple[Gateway, Ran]) -> None:
    gw, _ = env
    cap = gw.settings.max_pending_approvals_per_task
    one, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    two, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    calls = [
        asyncio.ensure_future(
            gw.pipeline.call(ident, "agents.save_draft", {"text": str(n)}, door=Door.MCP)
        )
        for ident in (one, two)
        for n in range(cap)
    ]
    await asked(gw, one.task_id, cap)
    await asked(gw, two.task_id, cap)
    assert not any(c.done() for c in calls)
    for ident in (one, two):
        await gw.tasks.end(ident.task_id)
    await asyncio.gather(*calls)


async def _settled(
    calls: list[asyncio.Task[ToolResult]], count: int
) -> list[asyncio.Task[ToolResult]]:
    for _ in range(500):
        done = [c for c in calls if c.done()]
        if len(done) >= count:
            return done
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {len([c for c in calls if c.done()])} calls ended")
