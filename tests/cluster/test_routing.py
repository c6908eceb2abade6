"""Routing on its own, with a stand-in pipeline and owner: a call the checks refuse is the
pipeline's, a call another node owns is answered from there, one it does not runs here, a
failed hop is recorded here, and calls under one key pass one at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.cluster.routing import Routing
from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ports import NO_FENCING, CallRunner
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolResult, ToolStatus
from tests.core_fixtures import identity


class _Empty(BaseModel):
    pass


async def _handler(_ctx: ToolContext, _args: Any) -> None:
    return None


WRITE = Tool("t.write", "Write", "writes", _Empty, _handler, side_effects=True, timeout_s=7.0)


def _result(call_id: str, where: str) -> ToolResult:
    return ToolResult(call_id=call_id, tool="t.write", status=ToolStatus.SUCCEEDED, output=where)


class FakePipeline:
    """The local pipeline: what it was asked to run, check and record."""

    def __init__(self, refusal: GatewayError | None = None) -> None:
        self.refusal = refusal
        self.ran: list[dict[str, Any]] = []
        self.unsent_calls: list[dict[str, Any]] = []

    async def call(
        self, identity: TaskIdentity, tool_name: str, raw_input: Any, **kw: Any
    ) -> ToolResult:
        self.ran.append({"tool": tool_name, "input": raw_input, **kw})
        return _result(kw["call_id"], "here")

    async def checked(self, identity: TaskIdentity, tool_name: str) -> Tool:
        if self.refusal is not None:
            raise self.refusal
        return WRITE

    async def unsent(
        self, identity: TaskIdentity, tool_name: str, raw_input: Any, **kw: Any
    ) -> ToolResult:
        self.unsent_calls.append({"tool": tool_name, **kw})
        failure = kw["failure"]
        return ToolResult(
            call_id=kw["call_id"],
            tool=tool_name,
            status=failure.tool_status if failure else ToolStatus.FAILED,
            error=failure.to_tool_error() if failure else None,
        )


class FakeOwner:
    """The node: another node's answer, None (run here), or a failure of the hop."""

    def __init__(self, answer: str | None = None, failure: GatewayError | None = None) -> None:
        self.answer, self.failure = answer, failure
        self.asked: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None

    async def elsewhere(
        self, identity: TaskIdentity, tool_name: str, args: Any, **kw: Any
    ) -> ToolResult | None:
        self.asked.append({"tool": tool_name, "args": args, **kw})
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return None if self.answer is None else _result(kw["call_id"], self.answer)


def _routing(pipeline: FakePipeline, owner: FakeOwner) -> CallRunner:
    return Routing(pipeline, owner)


async def test_a_call_another_node_owns_is_answered_from_there_and_runs_nothing_here() -> None:
    pipeline, owner = FakePipeline(), FakeOwner(answer="node-b")
    result = await _routing(pipeline, owner).call(
        identity(), "t.write", {"a": 1}, door=Door.MCP, idempotency_key="k", call_id="call_1"
    )
    assert result.output == "node-b" and result.call_id == "call_1"
    assert pipeline.ran == [] and pipeline.unsent_calls == []
    assert owner.asked == [
        {
            "tool": "t.write",
            "args": {"a": 1},
            "door": Door.MCP,
            "idempotency_key": "k",
            "call_id": "call_1",
            "timeout_s": 7.0,
        }
    ]


async def test_a_call_this_node_owns_runs_in_the_local_pipeline_with_all_it_was_given() -> None:
    pipeline, owner = FakePipeline(), FakeOwner(answer=None)
    cancel = asyncio.Event()
    result = await _routing(pipeline, owner).call(
        identity(), "t.write", {}, door=Door.BRIDGE, cancel=cancel
    )
    assert result.output == "here"
    (ran,) = pipeline.ran
    assert ran["cancel"] is cancel and ran["door"] is Door.BRIDGE
    # The id the owner was asked with is the one the call runs under here.
    assert ran["call_id"] == owner.asked[0]["call_id"] == result.call_id


async def test_a_call_the_checks_refuse_is_the_local_pipelines_and_goes_nowhere() -> None:
    refused = ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
    pipeline, owner = FakePipeline(refusal=refused), FakeOwner(answer="node-b")
    result = await _routing(pipeline, owner).call(identity(), "t.write", {}, door=Door.MCP)
    assert result.output == "here" and len(pipeline.ran) == 1
    assert owner.asked == []


async def test_a_failed_hop_is_recorded_here_as_unsent() -> None:
    gone = ToolFailure(ToolStatus.UNAVAILABLE, ErrorCode.UNAVAILABLE, "the owner is gone")
    pipeline, owner = FakePipeline(), FakeOwner(failure=gone)
    result = await _routing(pipeline, owner).call(
        identity(), "t.write", {}, door=Door.MCP, call_id="call_2"
    )
    assert result.status is ToolStatus.UNAVAILABLE and pipeline.ran == []
    (unsent,) = pipeline.unsent_calls
    assert unsent["call_id"] == "call_2" and unsent["failure"] is gone


async def test_a_caller_gone_during_the_hop_is_recorded_and_the_cancel_goes_on() -> None:
    pipeline, owner = FakePipeline(), FakeOwner(answer="node-b")
    owner.gate = asyncio.Event()
    call = asyncio.create_task(
        _routing(pipeline, owner).call(identity(), "t.write", {}, door=Door.MCP)
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert owner.asked
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    (unsent,) = pipeline.unsent_calls
    assert unsent["failure"] is None


async def test_calls_under_one_key_pass_one_at_a_time_and_other_keys_do_not_wait() -> None:
    pipeline, owner = FakePipeline(), FakeOwner(answer="node-b")
    owner.gate = asyncio.Event()
    routing = _routing(pipeline, owner)
    ident = identity()

    def send(key: str) -> asyncio.Task[ToolResult]:
        return asyncio.create_task(
            routing.call(ident, "t.write", {}, door=Door.MCP, idempotency_key=key)
        )

    first, second, other = send("k"), send("k"), send("other")
    for _ in range(20):
        await asyncio.sleep(0)
    assert [asked["idempotency_key"] for asked in owner.asked] == ["k", "other"]
    owner.gate.set()
    await asyncio.gather(first, second, other)
    assert [asked["idempotency_key"] for asked in owner.asked] == ["k", "other", "k"]


async def test_no_fencing_fences_nothing_and_keeps_no_handler() -> None:
    handler: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    assert await NO_FENCING.fence(identity(), "t.write", "k", "call_1") is None
    NO_FENCING.running("task_1", handler)
    handler.cancel()
