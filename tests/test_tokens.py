"""Tokens from the attacker's side: every way to present a bad token is a 401."""

from __future__ import annotations

import base64
import itertools
import json

import pytest

from gateway.core.errors import AuthError, TokenExpired
from gateway.core.tokens import Purpose, TokenService

KEYS = ["newest-key-0123456789abcdef", "older-key-0123456789abcdef"]


class FrozenClock:
    def __init__(self, now: float = 1_900_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_verifies_for_its_own_purpose() -> None:
    service = TokenService(KEYS)
    token, claims = service.mint("task_1", Purpose.AGENT, 60)
    verified = service.verify(token, Purpose.AGENT)
    assert verified.task_id == "task_1"
    assert verified.token_id == claims.token_id


@pytest.mark.parametrize(("minted", "presented"), list(itertools.permutations(list(Purpose), 2)))
def test_a_token_of_one_purpose_fails_for_every_other(minted: Purpose, presented: Purpose) -> None:
    service = TokenService(KEYS)
    token, _ = service.mint("task_1", minted, 60)
    with pytest.raises(AuthError) as caught:
        service.verify(token, presented)
    assert caught.value.http_status == 401
    assert caught.value.code == "invalid_token"


def test_a_tampered_payload_fails() -> None:
    service = TokenService(KEYS)
    token, _ = service.mint("task_1", Purpose.AGENT, 60)
    payload, rest = token.split(".", 1)
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["t"] = "task_of_someone_else"
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    with pytest.raises(AuthError):
        service.verify(f"{forged}.{rest}", Purpose.AGENT)


def test_a_tampered_signature_fails() -> None:
    service = TokenService(KEYS)
    token, _ = service.mint("task_1", Purpose.AGENT, 60)
    head, signature = token.rsplit(".", 1)
    # The signature's first character: all six of its bits are signature bits (the last
    # character's low bits are padding, and changing only those decodes to the same MAC).
    first = signature[0]
    flipped = f"{head}.{'A' if first != 'A' else 'B'}{signature[1:]}"
    with pytest.raises(AuthError):
        service.verify(flipped, Purpose.AGENT)


def test_a_token_signed_with_an_unknown_key_fails() -> None:
    attacker = TokenService(["attacker-key-0123456789abcdef"])
    token, _ = attacker.mint("task_1", Purpose.AGENT, 60)
    with pytest.raises(AuthError):
        TokenService(KEYS).verify(token, Purpose.AGENT)


def test_expiry_with_time_frozen() -> None:
    clock = FrozenClock()
    service = TokenService(KEYS, clock=clock)
    token, _ = service.mint("task_1", Purpose.TAB, 60)
    clock.now += 59
    assert service.verify(token, Purpose.TAB).task_id == "task_1"
    clock.now += 1
    with pytest.raises(TokenExpired) as caught:
        service.verify(token, Purpose.TAB)
    assert caught.value.http_status == 401


def test_rotation_keeps_older_keys_verifying_until_they_are_dropped() -> None:
    before = TokenService(["old-key-0123456789abcdefgh"])
    token, _ = before.mint("task_1", Purpose.AGENT, 60)
    rotated = TokenService(["new-key-0123456789abcdefgh", "old-key-0123456789abcdefgh"])
    assert rotated.verify(token, Purpose.AGENT).task_id == "task_1"
    # New tokens are signed with the newest key: they verify without the old one.
    fresh, _ = rotated.mint("task_2", Purpose.AGENT, 60)
    assert TokenService(["new-key-0123456789abcdefgh"]).verify(fresh, Purpose.AGENT)
    rotated_out = TokenService(["new-key-0123456789abcdefgh"])
    with pytest.raises(AuthError):
        rotated_out.verify(token, Purpose.AGENT)


@pytest.mark.parametrize("garbage", ["", "x", "a.b.c", "." * 50, "é" * 10, "a" * 5000])
def test_garbage_fails_cleanly(garbage: str) -> None:
    with pytest.raises(AuthError):
        TokenService(KEYS).verify(garbage, Purpose.AGENT)


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="16"):
        TokenService(["short"])
