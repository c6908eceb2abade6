"""Envelopes sealed, opened, answered and taken once, on a clock the test moves, with no bus:
what a node refuses, what it answers nothing, and what a sender accepts as its answer."""

from __future__ import annotations

import json
from typing import Any

from gateway.cluster.envelope import CLOCK_SKEW_S, MAX_AGE_S, Envelopes, digest
from gateway.core.tokens import new_key

KEY = new_key()


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def node(name: str, clock: Clock, *, remember: int = 10, key: str = KEY) -> Envelopes:
    return Envelopes(name, [key], remember=remember, clock=clock)


def call(call_id: str, to: str = "node-a", wait_s: float = 30) -> dict[str, Any]:
    return {"to": to, "task_id": "task_1", "call_id": call_id, "wait_s": wait_s}


def refusal(reply: bytes | dict[str, Any] | None, opener: Envelopes) -> str:
    assert isinstance(reply, bytes), reply
    opened = opener.verify("reply", reply)
    assert isinstance(opened, dict) and opened["by"] == "node-a"
    why: str = opened["refused"]
    return why


def test_a_genuine_envelope_is_taken_once_and_a_copy_gets_no_answer() -> None:
    clock = Clock()
    a, b = node("node-a", clock), node("node-b", clock)
    sent = b.seal("call", call("call_1"))

    assert a.take("call", sent, "call_id") == call("call_1")
    assert a.take("call", sent, "call_id") is None


def test_what_is_forged_misdirected_stale_or_malformed_is_refused() -> None:
    clock = Clock()
    a, b = node("node-a", clock), node("node-b", clock)
    stranger = node("node-b", clock, key=new_key())

    assert "bad or stale" in refusal(
        a.take("call", stranger.seal("call", call("c1")), "call_id"), b
    )
    assert "bad or stale" in refusal(a.take("call", json.dumps(call("c2")).encode(), "call_id"), b)
    assert "bad or stale" in refusal(a.take("call", b.seal("errand", call("c3")), "call_id"), b)
    assert "another node" in refusal(
        a.take("call", b.seal("call", call("c4", "node-b")), "call_id"), b
    )
    assert "malformed" in refusal(a.take("call", b.seal("call", {"to": "node-a"}), "call_id"), b)
    old = b.seal("call", call("c5", wait_s=10))
    clock.now += 12
    assert "too long ago" in refusal(a.take("call", old, "call_id"), b)


def test_a_seal_a_little_ahead_of_the_readers_clock_opens_and_one_far_ahead_does_not() -> None:
    clock = Clock()
    a = node("node-a", clock)
    ahead, far_ahead = Clock(), Clock()
    ahead.now += CLOCK_SKEW_S / 2
    far_ahead.now += 30
    assert a.take("call", node("node-b", ahead).seal("call", call("c1")), "call_id") is not None
    far = node("node-b", far_ahead).seal("call", call("c2"))
    assert isinstance(a.take("call", far, "call_id"), bytes)
    assert a.verify("message", node("node-b", far_ahead).seal("message", {})) is None
    # A broadcast older than a reader will hear is not heard.
    old = node("node-b", Clock()).seal("message", {})
    assert a.verify("message", old) == {}
    clock.now += MAX_AGE_S + 2
    assert a.verify("message", old) is None


def test_no_envelope_is_forgotten_while_its_window_is_open() -> None:
    clock = Clock()
    a, b = node("node-a", clock, remember=2), node("node-b", clock)
    first, second, third = (b.seal("call", call(f"c{n}", wait_s=5)) for n in range(3))
    assert a.take("call", first, "call_id") is not None
    assert a.take("call", second, "call_id") is not None

    assert "too many" in refusal(a.take("call", third, "call_id"), b)
    assert a.take("call", first, "call_id") is None  # still remembered
    # Once the windows close, room is made; the old envelope is refused as too old, not run.
    clock.now += 7
    assert a.take("call", b.seal("call", call("c4", wait_s=5)), "call_id") is not None
    assert "too long ago" in refusal(a.take("call", first, "call_id"), b)


def test_an_envelope_forgotten_may_be_taken_again() -> None:
    clock = Clock()
    a, b = node("node-a", clock), node("node-b", clock)
    sent = b.seal("call", call("c1"))
    assert a.take("call", sent, "call_id") is not None
    a.forget("c1")
    assert a.take("call", sent, "call_id") is not None


def test_a_sender_takes_only_its_addressees_answer_to_its_own_envelope() -> None:
    clock = Clock()
    a, b, c = node("node-a", clock), node("node-b", clock), node("node-c", clock)
    sent = b.seal("call", call("c1"))

    def accepted(reply: bytes) -> dict[str, Any] | None:
        return b.answer(reply, "node-a", "call_id", "c1", sent, 30)

    assert accepted(a.reply({"call_id": "c1", "result": 1})) == {
        "call_id": "c1",
        "result": 1,
        "by": "node-a",
    }
    assert accepted(b"junk") is None
    assert accepted(c.reply({"call_id": "c1", "result": 2})) is None  # another node's
    assert accepted(a.reply({"call_id": "c2", "result": 3})) is None  # another envelope's
    assert accepted(node("node-a", clock, key=new_key()).reply({"call_id": "c1"})) is None
    # A refusal of an envelope that did not open names it by its digest.
    refused = a.reply({"call_id": None, "refused": "bad", "for": digest(sent)})
    assert accepted(refused) is not None
    assert accepted(a.reply({"call_id": None, "refused": "bad", "for": digest(b"x")})) is None
