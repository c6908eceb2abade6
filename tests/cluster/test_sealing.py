"""Sealing what nodes tell each other: unreadable and unforgeable without the gateway's
keys, bound to its purpose, and opened by every key of a rotation."""

from __future__ import annotations

import json

import pytest

from gateway.cluster.sealing import Sealer, Unsealable
from gateway.core.tokens import new_key

CALL = {"task_id": "tsk_0123", "tool": "agents.save", "input": {"password": "hunter2"}}


def test_a_sealed_message_opens_with_its_time_and_reads_as_nothing_in_between() -> None:
    sealer = Sealer([new_key()], "call")
    sealed = sealer.seal(CALL, at=1_700_000_000.5)
    assert sealer.open(sealed) == (CALL, 1_700_000_000.5)
    for clear in (b"tsk_0123", b"agents.save", b"hunter2", b"password"):
        assert clear not in sealed
    # The same message sealed twice reads differently (a fresh nonce each time).
    assert sealer.seal(CALL) != sealer.seal(CALL)


def test_a_message_altered_forged_or_sealed_for_another_purpose_does_not_open() -> None:
    key = new_key()
    sealer = Sealer([key], "call")
    sealed = bytearray(sealer.seal(CALL))
    sealed[-1] ^= 1
    forged = [
        bytes(sealed),
        json.dumps(CALL).encode(),
        b"",
        Sealer([new_key()], "call").seal(CALL),  # a cluster with other keys
        Sealer([key], "reply").seal(CALL),  # the right key, another purpose
    ]
    for data in forged:
        with pytest.raises(Unsealable):
            sealer.open(data)


def test_the_newest_key_seals_and_every_key_opens() -> None:
    old, new = new_key(), new_key()
    before = Sealer([old], "message").seal(CALL)
    rotating = Sealer([new, old], "message")
    assert rotating.open(before)[0] == CALL
    after = rotating.seal(CALL)
    assert Sealer([new], "message").open(after)[0] == CALL
    with pytest.raises(Unsealable):
        Sealer([old], "message").open(after)
