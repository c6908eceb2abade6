"""What a handler sees of its call's deadline (`ToolContext.time_left()`): the tool's
`timeout_s` from when the handler starts, paused while a person is asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from gateway.core.approvals.broker import Decision
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.core_fixtures import identity, new_task, started


class Ask(BaseModel):
    ask: bool = False


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    async def left(ctx: ToolContext, args: Ask) -> dict[str, float]:
        before = ctx.time_left()
        if args.ask:
            await ctx.request_approval("Go on?")
        return {"before": before, "after": ctx.time_left()}

    async for running in started(settings):
        # A deadline shorter than the person in the second test takes to answer.
        running.registry.add(Tool("test.left", "Time left", "", Ask, left, timeout_s=0.3))
        yield running


async def test_a_handler_sees_the_time_its_deadline_leaves(gw: Gateway) -> None:
    ident, _ = await new_task(gw, scopes=())
    result = await gw.pipeline.call(ident, "test.left", {}, door=Door.MCP)
    assert result.ok, result
    assert 0 < result.output["after"] <= result.output["before"] <= 0.3


async def test_the_time_a_person_takes_is_not_counted(gw: Gateway) -> None:
    ident, _ = await new_task(gw, scopes=())
    pending = asyncio.ensure_future(
        gw.pipeline.call(ident, "test.left", {"ask": True}, door=Door.MCP)
    )
    for _ in range(200):
        if gw.approvals.pending(ident.task_id):
            break
        await asyncio.sleep(0.01)
    [request] = gw.approvals.pending(ident.task_id)
    await asyncio.sleep(0.5)  # longer than the tool's whole deadline
    await gw.approvals.decide(
        ident, request.id, Decision("approve", "call", "admin_7", "admin", "control")
    )
    result = await pending
    assert result.ok, result
    # Time is still left after the person answered: their 0.5 s was not taken from it.
    assert 0 < result.output["after"] <= result.output["before"]


def test_a_handler_run_outside_the_pipeline_has_no_deadline(gw: Gateway) -> None:
    tool = gw.registry.get("test.left")
    assert tool is not None
    ctx = ToolContext(identity(), "call_1", tool, Door.INTERNAL, gw.services)
    assert ctx.time_left() == float("inf")
