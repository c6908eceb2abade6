"""The call pipeline: every status and code, idempotency, bounds, and the evidence it leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from gateway.core.errors import ToolFailure
from gateway.core.identity import Budget
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolStatus
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.core_fixtures import new_task, started
from tests.first_release import reduce_to_first_release


@pytest.fixture
def settings(store_settings: Settings) -> Settings:
    """Every test of this module runs on SQLite and on PostgreSQL."""
    return store_settings


class Echo(BaseModel):
    text: str = Field(max_length=1000)
    times: int = Field(default=1, ge=1, le=5)


class Empty(BaseModel):
    pass


class Calls:
    def __init__(self) -> None:
        self.count = 0
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()  # `t.wait`'s handler is running


def install_tools(gw: Gateway, calls: Calls) -> None:
    async def echo(_ctx: ToolContext, args: Echo) -> dict[str, Any]:
        calls.count += 1
        return {"echo": args.text * args.times}

    async def boom(_ctx: ToolContext, _args: Empty) -> None:
        raise RuntimeError("kaboom at /home/alice/secret.txt")

    async def slow(_ctx: ToolContext, _args: Empty) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            calls.cancelled.set()
            raise

    async def wait(_ctx: ToolContext, _args: Empty) -> str:
        calls.waiting.set()
        try:
            await calls.release.wait()
        except asyncio.CancelledError:
            calls.cancelled.set()
            raise
        return "released"

    async def big(_ctx: ToolContext, _args: Empty) -> dict[str, str]:
        return {"blob": "x" * 5000}

    async def refuse(_ctx: ToolContext, _args: Empty) -> None:
        raise ToolFailure(ToolStatus.DENIED, ErrorCode.ORIGIN_BLOCKED, "foreign origin")

    async def side(_ctx: ToolContext, args: Echo) -> dict[str, Any]:
        calls.count += 1
        await asyncio.sleep(0.01)
        return {"wrote": args.text, "n": calls.count}

    async def leak(_ctx: ToolContext, args: Echo) -> dict[str, str]:
        return {"authorization": "Bearer abcdefghijklmnop", "note": args.text}

    reg = gw.registry
    reg.add(Tool("t.echo", "Echo", "Echo text", Echo, echo, scopes=frozenset({"ui"})))
    reg.add(Tool("t.boom", "Boom", "Fails", Empty, boom, scopes=frozenset({"ui"})))
    reg.add(Tool("t.slow", "Slow", "Sleeps", Empty, slow, scopes=frozenset({"ui"}), timeout_s=0.05))
    reg.add(Tool("t.wait", "Wait", "Waits", Empty, wait, scopes=frozenset({"ui"})))
    reg.add(
        Tool(
            "t.big",
            "Big",
            "Big output",
            Empty,
            big,
            scopes=frozenset({"ui"}),
            max_output_bytes=1000,
        )
    )
    reg.add(Tool("t.refuse", "Refuse", "Refuses", Empty, refuse, scopes=frozenset({"ui"})))
    reg.add(
        Tool(
            "t.side", "Side", "Side effect", Echo, side, scopes=frozenset({"ui"}), side_effects=True
        )
    )
    reg.add(
        Tool(
            "t.admin",
            "Admin",
            "Admins only",
            Echo,
            echo,
            scopes=frozenset({"ui"}),
            roles=frozenset({"admin"}),
        )
    )
    reg.add(Tool("t.scoped", "Scoped", "Needs browser", Echo, echo, scopes=frozenset({"browser"})))
    reg.add(Tool("t.leak", "Leak", "Returns a secret", Echo, leak, scopes=frozenset({"ui"})))


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[tuple[Gateway, Calls]]:
    calls = Calls()
    async for gw in started(settings):
        install_tools(gw, calls)
        yield gw, calls


async def test_success_returns_output_and_leaves_evidence(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "t.echo", {"text": "hi", "times": 2}, door=Door.MCP)
    assert result.status is ToolStatus.SUCCEEDED
    assert result.output == {"echo": "hihi"}
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert [(r["tool"], r["status"], r["door"]) for r in records] == [
        ("t.echo", "succeeded", "mcp")
    ]
    assert records[0]["input"] == {"text": "hi", "times": 2}


@pytest.mark.parametrize(
    ("tool", "payload", "status", "code"),
    [
        ("t.nope", {}, "denied", "unknown_tool"),
        ("t.scoped", {"text": "x"}, "denied", "forbidden"),
        ("t.echo", {"text": 5}, "failed", "invalid_input"),
        ("t.echo", {"text": "x", "extra": {"times": 9}, "times": 9}, "failed", "invalid_input"),
        ("t.echo", ["not", "an", "object"], "failed", "invalid_input"),
        ("t.boom", {}, "failed", "handler_error"),
        ("t.slow", {}, "timeout", "timeout"),
        ("t.refuse", {}, "denied", "origin_blocked"),
    ],
)
async def test_each_failure_is_one_terminal_result_with_its_code(
    env: tuple[Gateway, Calls], tool: str, payload: Any, status: str, code: str
) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, tool, payload, door=Door.BRIDGE)
    assert result.status == status
    assert result.error is not None
    assert result.error.code == code
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert len(records) == 1
    assert records[0]["status"] == status
    assert records[0]["error"]["code"] == code


async def test_invalid_input_names_the_fields(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "t.echo", {"times": 9}, door=Door.MCP)
    assert result.error is not None and result.error.details is not None
    fields = {tuple(e["loc"]) for e in result.error.details["errors"]}
    assert fields == {("text",), ("times",)}


async def test_handler_errors_do_not_leak_their_text(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "t.boom", {}, door=Door.MCP)
    assert result.error is not None
    assert "/home/alice" not in result.error.message
    assert "RuntimeError" in result.error.message


async def test_a_timeout_cancels_the_handler(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "t.slow", {}, door=Door.MCP)
    assert result.status is ToolStatus.TIMEOUT
    assert result.error is not None and result.error.retryable
    assert calls.cancelled.is_set()


async def test_a_cancel_event_ends_the_call_as_cancelled(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    cancel = asyncio.Event()
    pending = asyncio.create_task(
        gw.pipeline.call(ident, "t.wait", {}, door=Door.TAB, cancel=cancel)
    )
    await asyncio.wait_for(calls.waiting.wait(), 30)
    cancel.set()
    result = await pending
    assert (result.status, result.error and result.error.code) == ("failed", "cancelled")
    assert calls.cancelled.is_set()


async def test_a_cancelled_caller_still_leaves_one_record(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    pending = asyncio.create_task(gw.pipeline.call(ident, "t.wait", {}, door=Door.MCP))
    await asyncio.wait_for(calls.waiting.wait(), 30)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert calls.cancelled.is_set()
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert [(r["status"], r["error"]["code"]) for r in records] == [("failed", "cancelled")]


async def test_output_over_the_bound_is_cut_and_flagged(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    result = await gw.pipeline.call(ident, "t.big", {}, door=Door.MCP)
    assert result.status is ToolStatus.SUCCEEDED
    assert result.truncated is True
    assert result.output["original_bytes"] > 5000
    assert len(result.output["truncated_json"].encode()) <= 1000


async def test_a_member_cannot_call_an_admin_tool_and_does_not_see_it(
    env: tuple[Gateway, Calls],
) -> None:
    gw, calls = env
    member, _ = await new_task(gw, role="member")
    assert "t.admin" not in {t["tool_id"] for t in gw.registry.catalog(member)}
    result = await gw.pipeline.call(member, "t.admin", {"text": "x"}, door=Door.MCP)
    assert (result.status, result.error and result.error.code) == ("denied", "forbidden")
    assert calls.count == 0


async def test_listing_is_not_authority(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    narrowed, _ = await new_task(gw, allowed_tools=["t.echo"])
    assert [t["tool_id"] for t in gw.registry.catalog(narrowed)] == ["t.echo"]
    result = await gw.pipeline.call(narrowed, "t.side", {"text": "x"}, door=Door.MCP)
    assert result.error is not None and result.error.code == "forbidden"
    assert calls.count == 0


async def test_allowed_tools_prefixes(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw, allowed_tools=["t.*"])
    assert {t["tool_id"] for t in gw.registry.catalog(ident)} >= {"t.echo", "t.side"}
    none, _ = await new_task(gw, allowed_tools=[])
    assert gw.registry.catalog(none) == []


async def test_calls_of_an_ended_task_are_refused(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    await gw.tasks.end(ident.task_id)
    result = await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)
    assert (result.status, result.error and result.error.code) == ("denied", "revoked")
    assert calls.count == 0


async def test_budget_of_calls_is_enforced(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw, budget=Budget(max_calls=2))
    statuses = [
        (await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)).status
        for _ in range(3)
    ]
    assert statuses == ["succeeded", "succeeded", "denied"]
    last = await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)
    assert last.error is not None and last.error.code == "budget_exceeded"


async def test_idempotent_replay_runs_the_handler_once(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    results = await asyncio.gather(
        *(
            gw.pipeline.call(ident, "t.side", {"text": "a"}, door=Door.BRIDGE, idempotency_key="k1")
            for _ in range(5)
        )
    )
    assert calls.count == 1
    assert {r.output["n"] for r in results} == {1}
    assert sum(r.replayed for r in results) == 4
    other = await gw.pipeline.call(
        ident, "t.side", {"text": "b"}, door=Door.BRIDGE, idempotency_key="k2"
    )
    assert other.output["n"] == 2
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert len(records) == 6  # every call, replays included, leaves a record


async def test_idempotency_keys_belong_to_one_task(env: tuple[Gateway, Calls]) -> None:
    gw, calls = env
    first, _ = await new_task(gw)
    second, _ = await new_task(gw, org="org_b")
    for ident in (first, second):
        await gw.pipeline.call(ident, "t.side", {"text": "a"}, door=Door.MCP, idempotency_key="k")
    assert calls.count == 2


async def test_idempotent_replay_survives_a_restart(settings: Settings) -> None:
    calls = Calls()
    async for gw in started(settings):
        install_tools(gw, calls)
        ident, _ = await new_task(gw)
        first = await gw.pipeline.call(
            ident, "t.side", {"text": "a"}, door=Door.MCP, idempotency_key="once"
        )
    async for gw in started(settings):
        install_tools(gw, calls)
        again = await gw.pipeline.call(
            ident, "t.side", {"text": "a"}, door=Door.MCP, idempotency_key="once"
        )
    assert calls.count == 1
    assert again.replayed and again.output == first.output


async def test_a_key_reused_with_another_input_is_a_conflict_and_runs_nothing(
    env: tuple[Gateway, Calls],
) -> None:
    gw, calls = env
    ident, _ = await new_task(gw)
    first = await gw.pipeline.call(
        ident, "t.side", {"text": "a"}, door=Door.BRIDGE, idempotency_key="req-1"
    )
    assert first.ok and calls.count == 1
    other = await gw.pipeline.call(
        ident, "t.side", {"text": "b"}, door=Door.BRIDGE, idempotency_key="req-1"
    )
    assert other.status is ToolStatus.FAILED and not other.replayed
    assert other.error is not None and other.error.code == "conflict"
    assert other.error.details == {"call_id": first.call_id}
    assert calls.count == 1  # the second input never reached the handler
    # The same input again, its defaults spelled out this time, is the same request.
    again = await gw.pipeline.call(
        ident, "t.side", {"times": 1, "text": "a"}, door=Door.BRIDGE, idempotency_key="req-1"
    )
    assert again.replayed and again.output == first.output and calls.count == 1
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    assert [r["status"] for r in records] == ["succeeded", "failed", "succeeded"]


async def test_keys_recorded_before_inputs_were_kept_still_replay(settings: Settings) -> None:
    calls = Calls()
    async for gw in started(settings):
        install_tools(gw, calls)
        ident, _ = await new_task(gw)
        first = await gw.pipeline.call(
            ident, "t.side", {"text": "a"}, door=Door.MCP, idempotency_key="old"
        )
    # The data dir of a gateway from before the column existed (the first release's).
    reduce_to_first_release(settings.resolved_database_url())
    async for gw in started(settings):
        install_tools(gw, calls)
        again = await gw.pipeline.call(
            ident, "t.side", {"text": "other"}, door=Door.MCP, idempotency_key="old"
        )
        fresh = await gw.pipeline.call(
            ident, "t.side", {"text": "a"}, door=Door.MCP, idempotency_key="new"
        )
        conflict = await gw.pipeline.call(
            ident, "t.side", {"text": "b"}, door=Door.MCP, idempotency_key="new"
        )
    # A key kept without its input replays whatever the input; new keys are checked.
    assert again.replayed and again.output == first.output
    assert fresh.ok and not fresh.replayed
    assert conflict.error is not None and conflict.error.code == "conflict"
    assert calls.count == 2


async def test_evidence_is_redacted(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, tokens = await new_task(gw)
    result = await gw.pipeline.call(
        ident, "t.leak", {"text": f"token {tokens['agent']}"}, door=Door.MCP
    )
    assert result.status is ToolStatus.SUCCEEDED
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    stored = str(records)
    assert tokens["agent"] not in stored
    assert "abcdefghijklmnop" not in stored


async def test_evidence_reads_are_scoped_by_owner(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    a, _ = await new_task(gw, org="org_a")
    await gw.pipeline.call(a, "t.echo", {"text": "x"}, door=Door.MCP)
    assert await gw.store.evidence_for("org_b", a.task_id) == []
    assert len(await gw.store.evidence_for("org_a", a.task_id)) == 1


async def test_the_budget_survives_a_restart(settings: Settings) -> None:
    calls = Calls()
    async for gw in started(settings):
        install_tools(gw, calls)
        ident, _ = await new_task(gw, budget=Budget(max_calls=2, max_side_effects=1))
        await gw.pipeline.call(ident, "t.side", {"text": "a"}, door=Door.MCP)
        await gw.pipeline.call(ident, "t.nope", {}, door=Door.MCP)  # not charged: unknown
    async for gw in started(settings):
        install_tools(gw, calls)
        second_side = await gw.pipeline.call(ident, "t.side", {"text": "b"}, door=Door.MCP)
        assert second_side.error is not None
        assert second_side.error.code == "budget_exceeded"
        assert (await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)).ok
        last = await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)
        assert last.error is not None
        assert last.error.code == "budget_exceeded"
    assert calls.count == 2  # t.side once, t.echo once


async def test_an_ended_task_leaves_no_usage_behind(env: tuple[Gateway, Calls]) -> None:
    gw, _ = env
    ident, _ = await new_task(gw)
    await gw.pipeline.call(ident, "t.echo", {"text": "x"}, door=Door.MCP)
    assert ident.task_id in gw.pipeline._usage
    await gw.tasks.end(ident.task_id)
    assert ident.task_id not in gw.pipeline._usage
