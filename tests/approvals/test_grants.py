"""What "approve for this task" grants: exactly the need it answered, by the party that need
names. An actor's answer never covers a control need; a tool's own ask inside its handler,
approved for the task, stops that ask, not the gate in front of the tool; and a second grant
of what is already granted is an answer like any other, not a storage failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.approval_policy import ApprovalPolicy, Need, may_answer
from gateway.core.approvals.broker import ApprovalRefused
from gateway.core.identity import TaskIdentity
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ToolResult
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.approvals.test_asking import asked, control
from tests.core_fixtures import new_task, started

RUN_SCOPE = "evals:run"
COSTLY = 1000


class Run(BaseModel):
    tokens: int


class Ran:
    def __init__(self) -> None:
        self.tokens: list[int] = []


def install(gw: Gateway, ran: Ran) -> None:
    async def start_run(ctx: ToolContext, args: Run) -> dict[str, int]:
        # The product's own cost check, which the task's user may answer.
        if args.tokens > COSTLY:
            await ctx.request_approval(f"Spend up to {args.tokens} tokens", {"tokens": args.tokens})
        ran.tokens.append(args.tokens)
        return {"queued": args.tokens}

    gw.registry.add(
        Tool(
            "evals.start_run",
            "Start a run",
            "Queues a run",
            Run,
            start_run,
            scopes=frozenset({RUN_SCOPE}),
            side_effects=True,
        )
    )


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[tuple[Gateway, Ran]]:
    ran = Ran()
    async for gw in started(settings):
        install(gw, ran)
        yield gw, ran


# A member's task without `evals:run`: the control plane alone may let a run through.
BY_CONTROL = ApprovalPolicy.model_validate(
    {
        "grantable": [{"scope": RUN_SCOPE, "by": "control"}],
        "channels": ["tab", "control", "elicitation"],
    }
)
BY_ACTOR = ApprovalPolicy.model_validate(
    {"grantable": [{"tool": "evals.start_run"}], "channels": ["tab", "control"]}
)


def run(gw: Gateway, ident: TaskIdentity, tokens: int) -> asyncio.Task[ToolResult]:
    return asyncio.ensure_future(
        gw.pipeline.call(ident, "evals.start_run", {"tokens": tokens}, door=Door.MCP)
    )


async def in_tab(
    gw: Gateway, ident: TaskIdentity, request: Any, scope: str = "task", channel: str = "tab"
) -> None:
    """The task's own user answers in the tab (with the request's nonce), or whatever the
    agent's client runs answers its elicitation form."""
    await gw.approvals.answer(
        ident, request.id, decision="approve", scope=scope, channel=channel, nonce=request.nonce
    )


@pytest.mark.parametrize("channel", ["tab", "elicitation"])
async def test_an_actors_task_grant_of_the_tools_own_ask_does_not_open_the_control_gate(
    env: tuple[Gateway, Ran], channel: str
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, role="member", scopes=(), approvals=BY_CONTROL)
    first = run(gw, ident, 5000)
    [gate] = await asked(gw, ident.task_id)
    assert gate.by == "control"
    await gw.approvals.decide(ident, gate.id, control("approve", "call"))
    # Inside the handler, the product's cost check: the user says "for this task" in the
    # tab; a form at the agent's client can only confirm this one call.
    ask = await _next_request(gw, ident.task_id, gate.id)
    assert ask.by == "actor"
    await in_tab(gw, ident, ask, scope="task" if channel == "tab" else "call", channel=channel)
    assert (await first).ok
    assert ran.tokens == [5000]

    # The next run, small or large, still waits for the control plane.
    for tokens in (10, 9000):
        later = run(gw, ident, tokens)
        [again] = await asked(gw, ident.task_id)
        assert again.by == "control", "an actor's grant opened a control gate"
        await gw.approvals.decide(ident, again.id, control("deny"))
        assert not (await later).ok
    assert ran.tokens == [5000]
    # The tool is not granted; only its own ask is, for this task.
    assert "evals.start_run" not in await gw.approvals.grants(ident.task_id)


async def test_a_tools_own_ask_granted_for_the_task_is_not_asked_again(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, role="member", scopes=(), approvals=BY_CONTROL)
    first = run(gw, ident, 5000)
    [gate] = await asked(gw, ident.task_id)
    await gw.approvals.decide(ident, gate.id, control("approve", "task"))
    ask = await _next_request(gw, ident.task_id, gate.id)
    await in_tab(gw, ident, ask)
    assert (await first).ok
    # Both needs were granted for the task, each by the party it names: nothing asks now.
    assert (await run(gw, ident, 7000)).ok
    assert ran.tokens == [5000, 7000]
    assert len(await gw.approvals.listing(ident.task_id)) == 2


async def test_an_actor_answer_never_settles_a_control_need_whatever_the_channel(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, role="member", scopes=(), approvals=BY_CONTROL)
    pending = run(gw, ident, 10)
    [gate] = await asked(gw, ident.task_id)
    for channel in ("tab", "elicitation"):
        with pytest.raises(ApprovalRefused):
            await gw.approvals.answer(
                ident, gate.id, decision="approve", scope="task", channel=channel, nonce=gate.nonce
            )
    await gw.approvals.decide(ident, gate.id, control("deny"))
    assert not (await pending).ok
    assert await gw.approvals.grants(ident.task_id) == {}
    assert ran.tokens == []


def test_which_channel_may_answer_which_need() -> None:
    gate_by_control = Need("control", "beyond the grant")
    widening_by_actor = Need("actor", "beyond the grant")
    required = Need("actor", "required")
    own_ask = Need("actor", "the tool asks")
    assert may_answer("control", gate_by_control)
    assert not may_answer("tab", gate_by_control)
    assert not may_answer("elicitation", gate_by_control)
    assert may_answer("tab", widening_by_actor)
    # What the agent's client runs may confirm a call inside the grant, not widen it.
    assert not may_answer("elicitation", widening_by_actor)
    assert may_answer("elicitation", required)
    assert may_answer("elicitation", own_ask)
    assert all(may_answer("control", n) for n in (widening_by_actor, required, own_ask))


async def test_a_second_task_grant_of_a_granted_tool_is_an_ordinary_answer(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=BY_ACTOR)
    # Two calls wait at once; both are approved for the task, one from the tab.
    one, two = run(gw, ident, 1), run(gw, ident, 2)
    first, second = await asked(gw, ident.task_id, 2)
    await gw.approvals.decide(ident, first.id, control("approve", "task"))
    await in_tab(gw, ident, second)
    results = await asyncio.wait_for(asyncio.gather(one, two), timeout=10)
    assert all(r.ok for r in results), results
    assert sorted(ran.tokens) == [1, 2]
    grants = await gw.approvals.grants(ident.task_id)
    assert grants["evals.start_run"]["approval_id"] == first.id
    assert [a["status"] for a in await gw.approvals.listing(ident.task_id)] == [
        "approved",
        "approved",
    ]


async def test_concurrent_task_grants_of_one_tool_all_settle(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=BY_ACTOR)
    calls = [run(gw, ident, n) for n in range(4)]
    requests = await asked(gw, ident.task_id, 4)
    answers = await asyncio.gather(
        *(gw.approvals.decide(ident, r.id, control("approve", "task")) for r in requests),
        return_exceptions=True,
    )
    assert [a for a in answers if isinstance(a, BaseException)] == []
    assert all(r.ok for r in await asyncio.gather(*calls))
    assert sorted(ran.tokens) == [0, 1, 2, 3]
    assert len(await gw.approvals.grants(ident.task_id)) == 1


async def _next_request(gw: Gateway, task_id: str, after: str) -> Any:
    for _ in range(300):
        found = [r for r in gw.approvals.pending(task_id) if r.id != after]
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the handler asked nothing")
