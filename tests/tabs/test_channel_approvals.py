"""Approvals in the tab channel core: shown to the current tab (again after a reconnect),
taken away when closed, and an answer accepted only as bound to the request as shown."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.tabs.channel import TabChannel
from gateway.tabs.effects import Answer, Effect, Rejected, Send
from gateway.tabs.limits import ChannelLimits

TASK = "task_a"


def shown(approval_id: str = "apr_1", *, answerable: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": approval_id,
        "tool": "agents.save_draft",
        "summary": "Save the draft",
        "details": {},
        "by": "actor" if answerable else "control",
        "answerable": answerable,
        "status": "pending",
        "expires_at": 2e9,
    }
    if answerable:
        view["nonce"] = "n0nce"
    return view


def frames_of(effects: list[Effect], kind: str) -> list[dict[str, Any]]:
    return [e.frame for e in effects if isinstance(e, Send) and e.frame["type"] == kind]


def answer(**overrides: Any) -> str:
    body = {
        "type": "approval",
        "id": "apr_1",
        "task_id": TASK,
        "tab_id": "tab_1",
        "revision": 3,
        "nonce": "n0nce",
        "decision": "approve",
        "scope": "call",
        **overrides,
    }
    return json.dumps(body)


def connected(revision: int = 3) -> TabChannel:
    channel = TabChannel(TASK)
    channel.connect("c1", "tab_1", revision, {}, 0.0)
    return channel


def test_an_approval_is_shown_bound_to_the_tab_and_its_revision() -> None:
    channel = connected()
    [frame] = frames_of(channel.show_approval(shown()), "approval_request")
    assert (frame["task_id"], frame["tab_id"], frame["revision"]) == (TASK, "tab_1", 3)
    assert frame["nonce"] == "n0nce"


def test_an_answer_as_shown_goes_to_the_desk() -> None:
    channel = connected()
    channel.show_approval(shown())
    effects = channel.receive("c1", answer(), 1.0)
    assert effects == [Answer("c1", "apr_1", "approve", "call", "n0nce")]


def test_a_pending_approval_is_shown_again_to_a_tab_that_reconnects() -> None:
    channel = TabChannel(TASK)
    assert channel.show_approval(shown()) == []  # no tab yet: kept for when one comes
    effects = channel.connect("c2", "tab_2", 7, {}, 0.0)
    [frame] = frames_of(effects, "approval_request")
    assert (frame["tab_id"], frame["revision"]) == ("tab_2", 7)
    channel.disconnect("c2")
    [again] = frames_of(channel.connect("c3", "tab_3", 1, {}, 0.0), "approval_request")
    assert again["id"] == "apr_1"
    # An answer must name the newest showing: the old tab's revision no longer holds.
    refused = channel.receive("c3", answer(tab_id="tab_3", revision=7), 1.0)
    assert [e.reason for e in refused if isinstance(e, Rejected)] == ["stale_revision"]
    ok = channel.receive("c3", answer(tab_id="tab_3", revision=1), 1.0)
    assert [e for e in ok if isinstance(e, Answer)]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"id": "apr_other"}, "unknown_approval"),
        ({"task_id": "task_b"}, "wrong_task"),
        ({"tab_id": "tab_9"}, "wrong_tab"),
        ({"revision": 2}, "stale_revision"),
        ({"decision": "maybe"}, "invalid_frame"),
        ({"nonce": ""}, "invalid_frame"),
    ],
)
def test_an_answer_not_bound_to_the_request_is_refused(
    overrides: dict[str, Any], reason: str
) -> None:
    channel = connected()
    channel.show_approval(shown())
    effects = channel.receive("c1", answer(**overrides), 1.0)
    assert [e.reason for e in effects if isinstance(e, Rejected)] == [reason]
    assert not [e for e in effects if isinstance(e, Answer)]


def test_a_control_approval_shows_as_waiting_and_cannot_be_answered_here() -> None:
    channel = connected()
    [frame] = frames_of(channel.show_approval(shown(answerable=False)), "approval_request")
    assert frame["answerable"] is False
    assert "nonce" not in frame
    effects = channel.receive("c1", answer(), 1.0)
    assert [e.reason for e in effects if isinstance(e, Rejected)] == ["not_answerable"]


def test_a_closed_approval_leaves_the_tab_and_cannot_be_answered() -> None:
    channel = connected()
    channel.show_approval(shown())
    [closed] = frames_of(channel.close_approval("apr_1", "approved"), "approval_closed")
    assert closed == {"type": "approval_closed", "id": "apr_1", "status": "approved"}
    assert channel.approvals_shown() == []
    effects = channel.receive("c1", answer(), 1.0)
    assert [e.reason for e in effects if isinstance(e, Rejected)] == ["unknown_approval"]


def test_an_ended_task_shows_no_approval() -> None:
    channel = connected()
    channel.show_approval(shown())
    channel.end()
    assert channel.approvals_shown() == []
    assert channel.show_approval(shown("apr_2")) == []


def test_one_answer_per_showing_passes_the_rate_limit_and_no_more() -> None:
    # A person's answer must not be lost because the page was busy replying: like a reply
    # to a pending request, the one answer to each showing is bounded by the gateway.
    channel = TabChannel(TASK, ChannelLimits(rate_per_s=1, burst=1, max_strikes=100))
    channel.connect("c1", "tab_1", 3, {}, 0.0)
    channel.show_approval(shown())
    pong = json.dumps({"type": "pong"})
    assert channel.receive("c1", pong, 0.0) == []
    assert [e.reason for e in channel.receive("c1", pong, 0.0) if isinstance(e, Rejected)] == [
        "rate_limited"
    ]
    assert channel.receive("c1", answer(), 0.0) == [
        Answer("c1", "apr_1", "approve", "call", "n0nce")
    ]
    [again] = [e for e in channel.receive("c1", answer(), 0.0) if isinstance(e, Rejected)]
    assert again.reason == "rate_limited"
