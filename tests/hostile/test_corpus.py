"""The hostile input corpus, replayed case by case through each real door of one live gateway.

For every case: the answer is the contract's (HTTP status and error code, websocket close
code or error frame code, tool result status and code); nothing was accepted (no sentinel
handler ran, no task was created, no UI action reached a tab, no browser was opened); and
the gateway did not fall over (it answers `/healthz`, and a good call through the same door
still succeeds, on the same connection when it stayed open).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gateway.tabs import TabHub
from tests.hostile import http_doors
from tests.hostile.arena import Arena, arena_at, load_cases
from tests.hostile.tab_door import TASK as TAB_TASK
from tests.hostile.tab_door import replay_tab

pytestmark = pytest.mark.asyncio(loop_scope="module")

CASES = load_cases()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def arena(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Arena]:
    async with arena_at(tmp_path_factory.mktemp("hostile")) as running:
        yield running


async def test_the_corpus_is_large_and_well_formed() -> None:
    assert len(CASES) >= 200
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "case ids are unique"
    for case in CASES:
        assert {"id", "door", "kind", "send", "expect"} <= case.keys(), case["_source"]
        assert case["id"].startswith(case["door"] + "."), case["_source"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_case(arena: Arena, case: dict[str, Any]) -> None:
    door = case["door"]
    replay = {
        "tasks": _tasks,
        "mcp": _mcp,
        "ui_actions": _mcp,
        "browser": _mcp,
        "parent_tools": _parent_tools,
        "delegations": _delegations,
        "tabs": _tabs,
    }[door]
    await replay(arena, case)
    health = await arena.http.get("/healthz")
    assert health.status_code == 200


def _status_ok(expect: dict[str, Any], status: int) -> bool:
    if "http_in" in expect:
        return status in expect["http_in"]
    return expect.get("http") is None or status == expect["http"]


async def _tasks(arena: Arena, case: dict[str, Any]) -> None:
    expect = case["expect"]
    active = arena.gw.tasks.active_count()
    answer = await http_doors.replay_tasks(arena, case["send"])
    assert answer.status == expect["http"], answer.body
    assert answer.body["error"]["code"] == expect["code"], answer.body
    # Nothing accepted: no task came into being.
    assert arena.gw.tasks.active_count() == active
    await http_doors.good_task(arena)


async def _mcp(arena: Arena, case: dict[str, Any]) -> None:
    send, expect = case["send"], case["expect"]
    before = len(arena.seen.calls)
    tab_requests = _tab_requests(arena)
    browser_before = _browser_state(arena)
    answer = await http_doors.replay_mcp(arena, send, task=send.get("task", "main"))
    assert _status_ok(expect, answer.status), (answer.status, answer.body)
    result = http_doors.tool_result(answer)
    if "code" in expect:
        assert answer.body["error"]["code"] == expect["code"], answer.body
    if "tool_status" in expect:
        assert result is not None, answer.body
        assert result["status"] == expect["tool_status"], result
        if "tool_code" in expect:
            assert result["error"]["code"] == expect["tool_code"], result
    if expect.get("rpc_error_or_failed"):
        assert result is None or result["status"] in ("failed", "denied"), result
    if expect.get("rpc_error"):
        assert result is None and "error" in answer.body, answer.body
    if expect.get("whoami_is_task"):
        # The identity came from the token: the handler ran as the main task, whatever
        # the request's _meta claimed.
        assert result is not None
        assert result["output"] == {"task_id": arena.task_id(), "org_id": "org_h"}
        assert arena.seen.calls[-1]["task"] == arena.task_id()
        before += 1
    # Nothing accepted: no sentinel ran, no UI action went to a tab, no browser opened.
    assert len(arena.seen.calls) == before
    assert _tab_requests(arena) == tab_requests
    assert _browser_state(arena) == browser_before
    await http_doors.good_mcp_call(arena)


def _browser_state(arena: Arena) -> Any:
    """What `GET /v1/tasks/{id}` shows of the task's browser, read in process."""
    return arena.gw.task_probes["browser"](arena.task_id())


def _tab_requests(arena: Arena) -> float:
    """UI actions sent to any tab so far (`gateway_tab_requests`), read in process."""
    hub = arena.gw.services.get(TabHub)
    return sum(
        sample.value
        for metric in hub.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def _parent_tools(arena: Arena, case: dict[str, Any]) -> None:
    expect = case["expect"]
    before = len(arena.seen.calls)
    answer = await http_doors.replay_parent_tools(arena, case["send"])
    assert _status_ok(expect, answer.status), (answer.status, answer.body)
    body = answer.body
    assert body["schema"] == "wp-codebox/parent-tool-result/v1", body
    if expect["status"] == "denied_or_failed":
        assert body["status"] in ("denied", "failed"), body
    else:
        assert body["status"] == expect["status"], body
    if expect.get("code"):
        assert body["error"]["code"] == expect["code"], body
    assert len(arena.seen.calls) == before
    await http_doors.good_parent_tool(arena)


async def _delegations(arena: Arena, case: dict[str, Any]) -> None:
    expect = case["expect"]
    before = len(arena.seen.calls)
    answer = await http_doors.replay_delegations(arena, case["send"])
    assert _status_ok(expect, answer.status), (answer.status, answer.body)
    body = answer.body
    assert body["schema"] == "wp-codebox/host-delegation-result/v1", body
    assert body["status"] == expect["status"], body
    if expect.get("code"):
        assert body["error"]["code"] == expect["code"], body
    assert len(arena.seen.calls) == before
    await http_doors.good_delegation(arena)


async def _tabs(arena: Arena, case: dict[str, Any]) -> None:
    send, expect = case["send"], case["expect"]
    before = len(arena.seen.calls)
    rejected = len(await arena.evidence("tab.frame_rejected", TAB_TASK))
    run, pending = await replay_tab(arena, send, expect)
    if "handshake" in expect:
        assert run.handshake_status == expect["handshake"], run
        await _good_tab(arena)
        assert len(arena.seen.calls) == before + 1
        return
    errors = [f for f in run.frames if f.get("type") == "error"]
    if "error" in expect:
        assert errors, run
        assert errors[0]["code"] == expect["error"], run
    if "tool_result" in expect:
        result = next(f for f in run.frames if f.get("type") == "tool_result")
        assert result["status"] == expect["tool_result"]["status"], result
        assert result["error"]["code"] == expect["tool_result"]["code"], result
    if "close" in expect:
        assert run.close_code == expect["close"], run
    if expect.get("open"):
        assert run.close_code is None, run
    if expect.get("pending_kept"):
        # The forged reply settled nothing: the real tab's answer did, afterwards.
        assert pending is not None
        assert pending.kept, run
        outcome = await asyncio.wait_for(pending.task, 5)
        assert outcome.status == "succeeded", outcome
    good = [f for f in run.frames if f.get("type") == "good_call"]
    if run.close_code is None:
        assert good == [{"type": "good_call", "status": "succeeded"}], run
        before += 1
    else:
        await _good_tab(arena)
        before += 1
    # Only the good calls ran the sentinel.
    assert len(arena.seen.calls) == before
    if expect.get("evidence"):
        for _ in range(100):
            if len(await arena.evidence(expect["evidence"], TAB_TASK)) > rejected:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"no {expect['evidence']} evidence was recorded")


async def _good_tab(arena: Arena) -> None:
    run, _ = await replay_tab(
        arena,
        {"hello": {"type": "hello", "tab_id": "tab_good", "token": {"purpose_minted": "tab"}}},
        {},
    )
    assert {"type": "good_call", "status": "succeeded"} in run.frames, run
