"""Approval in the one pipeline: a call that needs a person waits, then runs with exactly
the input approved, or ends denied, expired or cancelled; one decision, one outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.approvals.broker import ApprovalConflict, ApprovalRefused, Decision
from gateway.core.approvals.waiting import KEEPALIVE_S
from gateway.core.errors import NotFound
from gateway.core.identity import TaskIdentity
from gateway.core.recording import input_digest
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.core_fixtures import new_task, started


class Draft(BaseModel):
    text: str


class Spend(BaseModel):
    tokens: int


class Ran:
    def __init__(self) -> None:
        self.inputs: list[str] = []


def install(gw: Gateway, ran: Ran) -> None:
    async def save(_ctx: ToolContext, args: Draft) -> dict[str, str]:
        ran.inputs.append(args.text)
        return {"saved": args.text}

    async def run(ctx: ToolContext, args: Spend) -> dict[str, int]:
        if args.tokens > 1000:
            await ctx.request_approval(
                f"Run an evaluation of {args.tokens} tokens", {"tokens": args.tokens}
            )
        ran.inputs.append(str(args.tokens))
        return {"ran": args.tokens}

    gw.registry.add(
        Tool(
            "agents.save_draft",
            "Save the draft",
            "Saves",
            Draft,
            save,
            scopes=frozenset({"agents:write"}),
            side_effects=True,
        )
    )
    # Its deadline (0.3 s) is shorter than a person takes: the wait must not count.
    gw.registry.add(
        Tool("evals.start", "Start a run", "Runs", Spend, run, scopes=frozenset(), timeout_s=0.3)
    )


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[tuple[Gateway, Ran]]:
    ran = Ran()
    async for gw in started(settings):
        install(gw, ran)
        yield gw, ran


GRANTABLE = ApprovalPolicy.model_validate({"grantable": [{"tool": "agents.save_draft"}]})
BY_CONTROL = ApprovalPolicy.model_validate(
    {"grantable": [{"tool": "agents.save_draft", "by": "control"}]}
)


async def asked(gw: Gateway, task_id: str, count: int = 1) -> list[Any]:
    """Wait until `count` approvals of the task are pending."""
    for _ in range(200):
        pending = gw.approvals.pending(task_id)
        if len(pending) >= count:
            return pending
        await asyncio.sleep(0.01)
    raise AssertionError("no approval was asked for")


def control(decision: str, scope: str = "call") -> Decision:
    return Decision(decision, scope, "admin_7", "admin", "control")  # type: ignore[arg-type]


def call(gw: Gateway, ident: TaskIdentity, text: str, **kw: Any) -> asyncio.Task[ToolResult]:
    return asyncio.ensure_future(
        gw.pipeline.call(ident, "agents.save_draft", {"text": text}, door=Door.MCP, **kw)
    )


async def test_approved_the_call_runs_once_with_the_input_approved(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "hello")
    [request] = await asked(gw, ident.task_id)
    assert ran.inputs == []  # nothing ran while it waits
    assert request.input_sha256 == input_digest({"text": "hello"})
    assert request.door == "mcp"
    await gw.approvals.decide(ident, request.id, control("approve"))
    result = await pending
    assert result.status is ToolStatus.SUCCEEDED
    assert ran.inputs == ["hello"]
    [stored] = await gw.approvals.listing(ident.task_id)
    assert stored["status"] == "approved"
    assert stored["decision"]["approver"] == {"id": "admin_7", "role": "admin"}
    records = await gw.store.evidence_for(ident.org_id, ident.task_id)
    kinds = [r["kind"] for r in records]
    assert kinds.count("approval.requested") == 1
    assert kinds.count("approval.decided") == 1
    [record] = [r for r in records if r["kind"] == "call"]
    assert record["context"]["approval"] == {"approval_id": request.id}


async def test_denied_the_handler_never_runs(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "no")
    [request] = await asked(gw, ident.task_id)
    await gw.approvals.decide(
        ident, request.id, Decision("deny", "call", "a", "admin", "control", "not today")
    )
    result = await pending
    assert (result.status, result.error and result.error.code) == (
        ToolStatus.DENIED,
        ErrorCode.APPROVAL_DENIED,
    )
    assert result.error is not None
    assert "not today" in result.error.message
    assert ran.inputs == []


async def test_no_answer_in_time_is_a_timeout_and_the_approval_expires(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    quick = ApprovalPolicy.model_validate({**GRANTABLE.model_dump(), "timeout_s": 1})
    ident, _ = await new_task(gw, scopes=(), approvals=quick)
    result = await call(gw, ident, "late")
    assert result.status is ToolStatus.TIMEOUT
    assert result.error is not None
    assert result.error.code == ErrorCode.APPROVAL_TIMEOUT
    assert ran.inputs == []
    [stored] = await gw.approvals.listing(ident.task_id)
    assert stored["status"] == "expired"
    # An answer after expiry is refused: the outcome is already the timeout.
    with pytest.raises(ApprovalConflict):
        await gw.approvals.decide(ident, stored["approval_id"], control("approve"))


async def test_the_agent_cancelling_cancels_the_approval(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    cancel = asyncio.Event()
    pending = call(gw, ident, "bye", cancel=cancel)
    [request] = await asked(gw, ident.task_id)
    cancel.set()
    result = await pending
    assert result.status is ToolStatus.FAILED
    assert result.error is not None
    assert result.error.code == ErrorCode.CANCELLED
    [stored] = await gw.approvals.listing(ident.task_id)
    assert stored["status"] == "cancelled"
    with pytest.raises(ApprovalConflict):
        await gw.approvals.decide(ident, request.id, control("approve"))
    assert ran.inputs == []


async def test_ending_the_task_cancels_its_pending_approvals(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "x")
    await asked(gw, ident.task_id)
    await gw.tasks.end(ident.task_id)
    result = await pending
    assert result.error is not None
    assert result.error.code == ErrorCode.CANCELLED
    assert [a["status"] for a in await gw.approvals.listing(ident.task_id)] == ["cancelled"]
    assert ident.task_id not in gw.approvals.task_ids()
    assert ran.inputs == []


async def test_one_decision_one_outcome(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "once")
    [request] = await asked(gw, ident.task_id)
    answers = await asyncio.gather(
        gw.approvals.decide(ident, request.id, control("approve")),
        gw.approvals.decide(ident, request.id, control("deny")),
        return_exceptions=True,
    )
    assert sum(isinstance(a, ApprovalConflict) for a in answers) == 1
    result = await pending
    winner = next(a for a in answers if not isinstance(a, BaseException))
    assert result.ok is (winner.status == "approved")
    assert len(ran.inputs) == (1 if result.ok else 0)


async def test_approval_of_one_call_does_not_let_another_input_through(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    first = call(gw, ident, "X")
    [request] = await asked(gw, ident.task_id)
    await gw.approvals.decide(ident, request.id, control("approve"))
    assert (await first).ok
    second = call(gw, ident, "Y")
    [again] = await asked(gw, ident.task_id)
    assert again.id != request.id
    assert again.input_sha256 == input_digest({"text": "Y"})
    await gw.approvals.decide(ident, again.id, control("deny"))
    assert not (await second).ok
    assert ran.inputs == ["X"]


async def test_approved_for_the_task_later_calls_pass_and_the_grant_shows(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    first = call(gw, ident, "one")
    [request] = await asked(gw, ident.task_id)
    await gw.approvals.decide(ident, request.id, control("approve", "task"))
    assert (await first).ok
    assert (await call(gw, ident, "two")).ok
    assert ran.inputs == ["one", "two"]
    assert len(await gw.approvals.listing(ident.task_id)) == 1
    grants = await gw.approvals.grants(ident.task_id)
    assert grants["agents.save_draft"]["approval_id"] == request.id


async def test_outside_the_grant_and_not_grantable_is_denied_without_asking(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=())
    result = await call(gw, ident, "x")
    assert result.error is not None
    assert result.error.code == ErrorCode.FORBIDDEN
    assert await gw.approvals.listing(ident.task_id) == []
    assert ran.inputs == []


async def test_a_grantable_tool_is_listed_to_the_agent(env: tuple[Gateway, Ran]) -> None:
    gw, _ = env
    plain, _ = await new_task(gw, scopes=())
    asking, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    assert "agents.save_draft" not in [t["tool_id"] for t in gw.registry.catalog(plain)]
    assert "agents.save_draft" in [t["tool_id"] for t in gw.registry.catalog(asking)]


async def test_a_required_tool_asks_within_the_grant(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    required = ApprovalPolicy.model_validate({"required": ["agents.save_draft"]})
    ident, _ = await new_task(gw, scopes=("agents:write",), approvals=required)
    pending = call(gw, ident, "r")
    [request] = await asked(gw, ident.task_id)
    assert request.reason == "required"
    await gw.approvals.decide(ident, request.id, control("approve"))
    assert (await pending).ok
    assert ran.inputs == ["r"]


async def test_a_tool_asks_while_it_runs_and_the_wait_is_not_its_deadline(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=())
    cheap = await gw.pipeline.call(ident, "evals.start", {"tokens": 10}, door=Door.MCP)
    assert cheap.ok
    pending = asyncio.ensure_future(
        gw.pipeline.call(ident, "evals.start", {"tokens": 5000}, door=Door.TAB)
    )
    [request] = await asked(gw, ident.task_id)
    assert request.summary == "Run an evaluation of 5000 tokens"
    assert request.details == {"tokens": 5000}
    await asyncio.sleep(0.5)  # longer than the tool's own 0.3 s deadline
    await gw.approvals.decide(ident, request.id, control("approve"))
    result = await pending
    assert result.ok, result
    assert ran.inputs == ["10", "5000"]


async def test_a_control_approval_is_not_answered_by_the_user(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, role="member", scopes=(), approvals=BY_CONTROL)
    pending = call(gw, ident, "m")
    [request] = await asked(gw, ident.task_id)
    for channel in ("tab", "elicitation"):
        with pytest.raises(ApprovalRefused):
            await gw.approvals.answer(
                ident, request.id, decision="approve", scope="call", channel=channel
            )
    await gw.approvals.decide(ident, request.id, control("approve"))
    assert (await pending).ok
    assert ran.inputs == ["m"]


async def test_another_tasks_identity_finds_nothing(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    other, _ = await new_task(gw, org="org_b", scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "mine")
    [request] = await asked(gw, ident.task_id)
    with pytest.raises(NotFound):
        await gw.approvals.decide(other, request.id, control("approve"))
    await gw.approvals.decide(ident, request.id, control("deny"))
    assert not (await pending).ok
    assert ran.inputs == []


async def test_a_tab_answer_needs_this_requests_nonce(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = call(gw, ident, "n")
    [request] = await asked(gw, ident.task_id)
    nonce = request.nonce
    for wrong in (None, "forged", nonce[:-1]):
        with pytest.raises(ApprovalRefused):
            await gw.approvals.answer(
                ident, request.id, decision="approve", scope="call", channel="tab", nonce=wrong
            )
    await gw.approvals.answer(
        ident, request.id, decision="approve", scope="call", channel="tab", nonce=nonce
    )
    assert (await pending).ok
    assert ran.inputs == ["n"]
    # The nonce is spent: replaying the same answer is refused.
    with pytest.raises(ApprovalConflict):
        await gw.approvals.answer(
            ident, request.id, decision="approve", scope="call", channel="tab", nonce=nonce
        )
    [stored] = await gw.approvals.listing(ident.task_id)
    assert stored["decision"]["channel"] == "tab"
    # From the tab, the approver is the task's own user, whoever the page says it is.
    assert stored["decision"]["approver"] == {"id": ident.actor.id, "role": ident.actor.role}


async def test_a_call_through_the_tabs_own_webmcp_is_not_approved_in_that_tab(
    env: tuple[Gateway, Ran],
) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    pending = asyncio.ensure_future(
        gw.pipeline.call(ident, "agents.save_draft", {"text": "w"}, door=Door.WEBMCP)
    )
    [request] = await asked(gw, ident.task_id)
    assert not request.answerable_in_tab
    assert "nonce" not in request.shown()
    with pytest.raises(ApprovalRefused):
        await gw.approvals.answer(
            ident, request.id, decision="approve", scope="call", channel="tab", nonce=request.nonce
        )
    await gw.approvals.decide(ident, request.id, control("approve"))
    assert (await pending).ok
    assert ran.inputs == ["w"]


async def test_an_idempotent_replay_does_not_ask_again(env: tuple[Gateway, Ran]) -> None:
    gw, ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    first = call(gw, ident, "k", idempotency_key="key-1")
    [request] = await asked(gw, ident.task_id)
    await gw.approvals.decide(ident, request.id, control("approve"))
    assert (await first).ok
    replay = await gw.pipeline.call(
        ident, "agents.save_draft", {"text": "k"}, door=Door.MCP, idempotency_key="key-1"
    )
    assert replay.replayed
    assert len(await gw.approvals.listing(ident.task_id)) == 1
    assert ran.inputs == ["k"]


async def test_pending_approvals_of_a_stopped_gateway_end_cancelled(settings: Settings) -> None:
    async for gw in started(settings):
        install(gw, Ran())
        ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
        # Stored as the call would, but the process "stops" before anyone answers.
        await gw.store.insert_approval(
            {
                "approval_id": "apr_orphan",
                "task_id": ident.task_id,
                "org_id": ident.org_id,
                "call_id": "call_x",
                "tool": "agents.save_draft",
                "status": "pending",
                "created_at": 1.0,
                "expires_at": 2.0,
            },
            "nonce",
        )
    async for gw in started(settings):
        [stored] = await gw.approvals.listing(ident.task_id)
        assert stored["status"] == "cancelled"


async def test_a_decision_wakes_the_call_at_once_not_at_its_next_keepalive(
    env: tuple[Gateway, Ran],
) -> None:
    gw, _ran = env
    ident, _ = await new_task(gw, scopes=(), approvals=GRANTABLE)
    # Every door passes a cancel event; the wait must end on whichever comes first.
    pending = call(gw, ident, "prompt", cancel=asyncio.Event())
    [request] = await asked(gw, ident.task_id)
    await gw.approvals.decide(ident, request.id, control("approve"))
    result = await asyncio.wait_for(pending, timeout=KEEPALIVE_S / 2)
    assert result.ok
