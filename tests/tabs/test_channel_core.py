"""The tab channel core, driven by plain method calls: no sockets, no clock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.results import ToolStatus
from gateway.tabs.actions import OpenView, PopulateDraft, ReadView, ShowRunProgress
from gateway.tabs.channel import TabChannel
from gateway.tabs.effects import (
    CancelCall,
    Close,
    Effect,
    Rejected,
    Send,
    Settle,
    StartCall,
)
from gateway.tabs.limits import ChannelLimits

TASK = "task_a"
BUILDER_A1 = {"view": "agent_builder", "params": {"agent_id": "ag_1"}, "selection": {}}


def sends(effects: list[Effect], conn: str | None = None) -> list[dict[str, Any]]:
    return [e.frame for e in effects if isinstance(e, Send) and (conn is None or e.conn == conn)]


def settled(effects: list[Effect]) -> list[Settle]:
    return [e for e in effects if isinstance(e, Settle)]


def rejected(effects: list[Effect]) -> list[str]:
    return [e.reason for e in effects if isinstance(e, Rejected)]


def closes(effects: list[Effect]) -> list[tuple[str, int]]:
    return [(e.conn, e.code) for e in effects if isinstance(e, Close)]


def reply(
    request_id: str,
    *,
    task: str = TASK,
    tab: str = "tab_1",
    revision: int = 1,
    ok: bool = True,
    **extra: Any,
) -> str:
    body = {
        "type": "reply",
        "id": request_id,
        "task_id": task,
        "tab_id": tab,
        "revision": revision,
        "ok": ok,
        **extra,
    }
    if ok and "result" not in extra:
        body["result"] = {"applied": True}
    return json.dumps(body)


def state(revision: int, view: dict[str, Any]) -> str:
    return json.dumps({"type": "state", "revision": revision, "view": view})


@pytest.fixture
def channel() -> TabChannel:
    ch = TabChannel(TASK, ChannelLimits(heartbeat_s=10))
    assert ch.connect("c1", "tab_1", 1, BUILDER_A1, now=0) == []
    return ch


def test_request_frame_names_task_revision_and_expiry(channel: TabChannel) -> None:
    effects = channel.request("r1", ShowRunProgress(run_id="run_9"), now=100, timeout_s=5)
    assert sends(effects, "c1") == [
        {
            "type": "request",
            "id": "r1",
            "task_id": TASK,
            "revision": 1,
            "action": {"type": "show_run_progress", "run_id": "run_9"},
            "expires_at": 105,
        }
    ]
    assert channel.pending_ids() == ["r1"]


def test_matching_reply_settles_succeeded(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.receive("c1", reply("r1", result={"view": "agent_builder"}), now=1)
    [outcome] = [s.outcome for s in settled(effects)]
    assert outcome.status is ToolStatus.SUCCEEDED
    assert outcome.result == {"view": "agent_builder"}
    assert channel.pending_ids() == []


def test_duplicate_reply_is_rejected(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    channel.receive("c1", reply("r1"), now=1)
    effects = channel.receive("c1", reply("r1"), now=2)
    assert rejected(effects) == ["unknown_request"]
    assert sends(effects, "c1")[0]["type"] == "error"
    assert settled(effects) == []


def test_out_of_order_replies_each_settle_their_own_request(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    channel.request("r2", ShowRunProgress(run_id="run_1"), now=0, timeout_s=5)
    second = channel.receive("c1", reply("r2", result={"n": 2}), now=1)
    first = channel.receive("c1", reply("r1", result={"n": 1}), now=1)
    assert [(s.outcome.request_id, s.outcome.result) for s in settled(second + first)] == [
        ("r2", {"n": 2}),
        ("r1", {"n": 1}),
    ]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"task": "task_b"}, "wrong_task"),
        ({"tab": "tab_2"}, "wrong_tab"),
        ({"revision": 0}, "stale_revision"),
        ({"revision": 7}, "stale_revision"),
    ],
)
def test_mismatched_reply_is_rejected_and_request_stays_pending(
    channel: TabChannel, kwargs: dict[str, Any], reason: str
) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.receive("c1", reply("r1", **kwargs), now=1)
    assert rejected(effects) == [reason]
    assert settled(effects) == []
    assert channel.pending_ids() == ["r1"]
    # The real reply still completes it.
    assert settled(channel.receive("c1", reply("r1"), now=2))[0].outcome.ok


def test_reply_for_another_tasks_request_is_unknown_here() -> None:
    a, b = TabChannel("task_a"), TabChannel("task_b")
    a.connect("ca", "tab_a", 1, {}, now=0)
    b.connect("cb", "tab_b", 1, {}, now=0)
    a.request("ra", ReadView(), now=0, timeout_s=5)
    forged = b.receive("cb", reply("ra", task="task_a", tab="tab_a"), now=1)
    assert rejected(forged) == ["unknown_request"]
    assert a.pending_ids() == ["ra"]
    assert settled(a.receive("ca", reply("ra", task="task_a", tab="tab_a"), now=1))[0].outcome.ok


def test_reply_from_a_superseded_connection_is_not_accepted(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.connect("c2", "tab_1", 1, BUILDER_A1, now=1)
    assert closes(effects) == [("c1", 4001)]
    assert {"type": "bye", "reason": "superseded"} in sends(effects, "c1")
    [outcome] = [s.outcome for s in settled(effects)]
    assert (outcome.status, outcome.error and outcome.error.code) == (
        ToolStatus.UNAVAILABLE,
        "tab_unavailable",
    )
    assert outcome.error is not None and outcome.error.retryable
    late = channel.receive("c1", reply("r1"), now=2)
    assert sends(late, "c1")[0]["code"] == "not_current"
    assert settled(late) == []


def test_late_reply_after_expiry_times_out_and_is_rejected(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.receive("c1", reply("r1"), now=6)
    [outcome] = [s.outcome for s in settled(effects)]
    assert outcome.status is ToolStatus.TIMEOUT
    assert rejected(effects) == ["expired"]


def test_expiry_times_out_and_tells_the_tab(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    assert channel.tick(4) == []
    effects = channel.tick(5)
    assert settled(effects)[0].outcome.status is ToolStatus.TIMEOUT
    assert settled(effects)[0].outcome.error.retryable  # type: ignore[union-attr]
    assert {"type": "cancel", "id": "r1", "reason": "timeout"} in sends(effects, "c1")
    assert channel.expire("r1") == []


def test_cancel_fails_cancelled_and_sends_cancel(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.cancel("r1")
    outcome = settled(effects)[0].outcome
    assert (outcome.status, outcome.error and outcome.error.code) == (
        ToolStatus.FAILED,
        "cancelled",
    )
    assert sends(effects, "c1") == [{"type": "cancel", "id": "r1", "reason": "cancelled"}]
    assert rejected(channel.receive("c1", reply("r1"), now=1)) == ["unknown_request"]


def test_state_rechecks_pending_requests(channel: TabChannel) -> None:
    channel.request(
        "draft",
        PopulateDraft.model_validate({"agent_id": "ag_1", "fields": {"name": "Helper"}}),
        now=0,
        timeout_s=5,
    )
    channel.request("read", ReadView(), now=0, timeout_s=5)
    channel.request("open", OpenView(view="runs"), now=0, timeout_s=5)
    effects = channel.receive(
        "c1", state(2, {"view": "agent_builder", "params": {"agent_id": "ag_2"}}), now=1
    )
    [stale] = [s.outcome for s in settled(effects)]
    assert (stale.request_id, stale.error and stale.error.code) == ("draft", "stale_target")
    assert {"type": "cancel", "id": "draft", "reason": "stale_target"} in sends(effects, "c1")
    # The others were re-aimed at revision 2: a reply at 1 is now stale, at 2 accepted.
    assert rejected(channel.receive("c1", reply("read", revision=1), now=1)) == ["stale_revision"]
    assert settled(channel.receive("c1", reply("read", revision=2), now=1))[0].outcome.ok
    assert settled(channel.receive("c1", reply("open", revision=2), now=1))[0].outcome.ok


def test_state_that_still_fits_keeps_the_request(channel: TabChannel) -> None:
    action = PopulateDraft.model_validate({"agent_id": "ag_1", "fields": {"model": "m-1"}})
    channel.request("draft", action, now=0, timeout_s=5)
    moved = {"view": "agent_builder", "params": {"agent_id": "ag_1"}, "selection": {"tab": "x"}}
    assert settled(channel.receive("c1", state(2, moved), now=1)) == []
    assert settled(channel.receive("c1", reply("draft", revision=2), now=1))[0].outcome.ok


def test_state_view_that_no_longer_offers_the_action_is_stale(channel: TabChannel) -> None:
    channel.request("p", ShowRunProgress(run_id="run_1"), now=0, timeout_s=5)
    view = {"view": "settings", "params": {}, "available_actions": ["open_view", "read_view"]}
    outcome = settled(channel.receive("c1", state(2, view), now=1))[0].outcome
    assert outcome.error is not None and outcome.error.code == "stale_target"


def test_revision_only_grows(channel: TabChannel) -> None:
    effects = channel.receive("c1", state(1, BUILDER_A1), now=1)
    assert rejected(effects) == ["stale_revision"]
    assert channel.revision() == 1


def test_disconnect_fails_pending_as_retryable_tab_unavailable(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    outcome = settled(channel.disconnect("c1"))[0].outcome
    assert outcome.status is ToolStatus.UNAVAILABLE
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.retryable) == ("tab_unavailable", True)
    later = settled(channel.request("r2", ReadView(), now=1, timeout_s=5))[0].outcome
    assert later.error is not None and later.error.code == "tab_unavailable"
    channel.connect("c2", "tab_1", 3, BUILDER_A1, now=2)
    effects = channel.request("r3", ReadView(), now=2, timeout_s=5)
    assert sends(effects, "c2")[0]["revision"] == 3


def test_task_end_says_bye_closes_4002_and_refuses_new_tabs(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    effects = channel.end()
    assert closes(effects) == [("c1", 4002)]
    assert {"type": "bye", "reason": "task_ended"} in sends(effects, "c1")
    outcome = settled(effects)[0].outcome
    assert outcome.error is not None and not outcome.error.retryable
    assert closes(channel.connect("c2", "tab_1", 1, {}, now=1)) == [("c2", 4002)]


def test_token_expiry_closes_4003(channel: TabChannel) -> None:
    effects = channel.token_expired("c1")
    assert closes(effects) == [("c1", 4003)]
    assert {"type": "bye", "reason": "token_expired"} in sends(effects, "c1")


def test_oversized_frame_closes_1009() -> None:
    ch = TabChannel(TASK, ChannelLimits(max_frame_bytes=100))
    ch.connect("c1", "tab_1", 1, {}, now=0)
    assert closes(ch.receive("c1", "x" * 101, now=1)) == [("c1", 1009)]


def test_malformed_frames_get_errors_then_1008() -> None:
    ch = TabChannel(TASK, ChannelLimits(max_strikes=3))
    ch.connect("c1", "tab_1", 1, {}, now=0)
    first = ch.receive("c1", "{not json", now=1)
    assert sends(first)[0] == {
        "type": "error",
        "code": "invalid_frame",
        "message": "the frame is not valid JSON",
    }
    assert closes(first) == []
    assert rejected(ch.receive("c1", json.dumps({"type": "nope"}), now=1)) == ["invalid_frame"]
    third = ch.receive("c1", json.dumps([1, 2]), now=1)
    assert closes(third) == [("c1", 1008)]


def test_rate_limit_refuses_frames_beyond_the_burst() -> None:
    ch = TabChannel(TASK, ChannelLimits(rate_per_s=1, burst=2, max_strikes=100))
    ch.connect("c1", "tab_1", 1, {}, now=0)
    pong = json.dumps({"type": "pong"})
    assert ch.receive("c1", pong, now=0) == []
    assert ch.receive("c1", pong, now=0) == []
    assert rejected(ch.receive("c1", pong, now=0)) == ["rate_limited"]
    assert ch.receive("c1", pong, now=1.5) == []
    # Replies to pending requests are bounded by the gateway's own requests: they pass.
    ch.request("r1", ReadView(), now=1.5, timeout_s=5)
    assert rejected(ch.receive("c1", pong, now=1.5)) == ["rate_limited"]
    assert settled(ch.receive("c1", reply("r1"), now=1.5))[0].outcome.ok


def test_pending_cap_refuses_more_requests() -> None:
    ch = TabChannel(TASK, ChannelLimits(max_pending=1))
    ch.connect("c1", "tab_1", 1, {}, now=0)
    ch.request("r1", ReadView(), now=0, timeout_s=5)
    outcome = settled(ch.request("r2", ReadView(), now=0, timeout_s=5))[0].outcome
    assert outcome.status is ToolStatus.UNAVAILABLE
    assert outcome.error is not None and outcome.error.code == "rate_limited"


def test_page_error_reply_fails_with_its_code_or_handler_error(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    channel.request("r2", ReadView(), now=0, timeout_s=5)
    stale = channel.receive(
        "c1", reply("r1", ok=False, error={"code": "stale_target", "message": "moved"}), now=1
    )
    odd = channel.receive(
        "c1", reply("r2", ok=False, error={"code": "no_handler", "message": "nope"}), now=1
    )
    a, b = settled(stale)[0].outcome, settled(odd)[0].outcome
    assert a.error is not None and a.error.code == "stale_target"
    assert b.error is not None and b.error.code == "handler_error"
    assert b.error.details == {"tab_code": "no_handler"}


def test_tool_calls_start_cancel_finish_and_are_capped() -> None:
    ch = TabChannel(TASK, ChannelLimits(max_calls=1))
    ch.connect("c1", "tab_1", 1, {}, now=0)
    call = {"type": "tool_call", "id": "k1", "tool": "ui.read_view", "input": {}, "via": "webmcp"}
    assert ch.receive("c1", json.dumps(call), now=0) == [
        StartCall("c1", "k1", "ui.read_view", {}, webmcp=True)
    ]
    assert rejected(ch.receive("c1", json.dumps(call), now=0)) == ["duplicate_call"]
    busy = sends(ch.receive("c1", json.dumps({**call, "id": "k2"}), now=0))[0]
    assert (busy["type"], busy["id"], busy["status"]) == ("tool_result", "k2", "unavailable")
    assert ch.receive("c1", json.dumps({"type": "cancel", "id": "k1"}), now=0) == [
        CancelCall("c1", "k1")
    ]
    done = ch.call_finished("c1", "k1", {"call_id": "call_x", "status": "succeeded"})
    assert sends(done) == [
        {"type": "tool_result", "id": "k1", "call_id": "call_x", "status": "succeeded"}
    ]
    # A cancel after the call finished is a harmless race.
    assert ch.receive("c1", json.dumps({"type": "cancel", "id": "k1"}), now=0) == []


def test_disconnect_cancels_running_calls(channel: TabChannel) -> None:
    call = {"type": "tool_call", "id": "k1", "tool": "x", "input": {}}
    [start] = channel.receive("c1", json.dumps(call), now=0)
    assert isinstance(start, StartCall) and not start.webmcp
    assert CancelCall("c1", "k1") in channel.disconnect("c1")


def test_heartbeat_pings_and_drops_a_silent_tab(channel: TabChannel) -> None:
    assert sends(channel.tick(10)) == [{"type": "ping"}]
    assert channel.tick(15) == []
    assert channel.receive("c1", json.dumps({"type": "pong"}), now=16) == []
    assert channel.tick(20) == []
    assert sends(channel.tick(26)) == [{"type": "ping"}]
    assert closes(channel.tick(46)) == [("c1", 1011)]
    assert channel.conn_id is None


def test_describe_reports_tab_state(channel: TabChannel) -> None:
    channel.request("r1", ReadView(), now=0, timeout_s=5)
    assert channel.describe() == {
        "connected": True,
        "tab_id": "tab_1",
        "revision": 1,
        "view": "agent_builder",
        "pending_requests": 1,
        "running_calls": 0,
        "ended": None,
    }
