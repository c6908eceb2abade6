"""What one node sends another, sealed and opened, and the routed envelopes an owner has
taken, remembered so that each runs once.

Every message is sealed with the gateway's keys for its purpose (`sealing.py`): a routed
call, an errand, a reply, a broadcast. A reply names the node that sealed it, so a sender
takes only its addressee's. A routed envelope is taken when it opens, was sealed no longer
ago than its own wait, is addressed to this node and was not taken before; its id is
remembered until that window closes. Nothing here touches the bus, and the time comes from
the clock it is given: it is tested without either.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .sealing import Sealer, Unsealable

log = logging.getLogger(__name__)

PURPOSES = ("call", "errand", "reply", "message")
# A sealed message older than this is not opened (a replay; the bus delivers in milliseconds).
MAX_AGE_S = 600
# How far ahead of a reader's clock a message's seal may be (two machines' clocks agree
# only so well).
CLOCK_SKEW_S = 2.0
# A routed envelope's window: its wait, and one second more for the clocks of two machines.
WINDOW_SLACK_S = 1.0


def sealer(keys: list[str], purpose: str) -> Sealer:
    """What seals and opens one kind of message between the nodes: the gateway's keys,
    newest first (it seals; every key opens, the rotation task tokens have)."""
    return Sealer(keys, purpose)


def digest(envelope: bytes) -> str:
    """How a refusal names an envelope it could not open (so only its sender takes it)."""
    return hashlib.sha256(envelope).hexdigest()[:32]


class Envelopes:
    """Seals and opens node `node_id`'s messages, and remembers the envelopes it took: at
    most `remember` open windows at once (past that, a new envelope is refused rather than
    an open window forgotten)."""

    def __init__(
        self,
        node_id: str,
        keys: list[str],
        *,
        remember: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node_id = node_id
        self._sealers = {purpose: sealer(keys, purpose) for purpose in PURPOSES}
        self._limit = remember
        self._clock = clock
        # Envelope ids taken, and when their window closes, in the order they were taken.
        self._taken: OrderedDict[str, float] = OrderedDict()

    def seal(self, purpose: str, value: Any) -> bytes:
        return self._sealers[purpose].seal(value, self._clock())

    def reply(self, value: dict[str, Any]) -> bytes:
        """A reply, sealed and naming this node."""
        return self.seal("reply", {**value, "by": self.node_id})

    def open(self, purpose: str, data: bytes, max_age_s: float) -> tuple[Any, float] | None:
        """The sealed value and when it was sealed, or None when the seal, purpose or age
        is wrong."""
        try:
            value, sealed_at = self._sealers[purpose].open(data)
        except (Unsealable, ValueError, KeyError, TypeError):
            log.warning("cluster: ignored a %s message that does not open", purpose)
            return None
        age = self._clock() - sealed_at
        if not -CLOCK_SKEW_S <= age <= max_age_s + 1:
            log.warning("cluster: ignored a %s message sealed %.1f s ago", purpose, age)
            return None
        return value, sealed_at

    def verify(self, purpose: str, data: bytes, max_age_s: float = MAX_AGE_S) -> Any:
        """The sealed value, or None."""
        opened = self.open(purpose, data, max_age_s)
        return opened[0] if opened is not None else None

    def answer(
        self,
        reply: bytes,
        node: str,
        id_key: str,
        envelope_id: str,
        sent: bytes,
        max_age_s: float,
    ) -> dict[str, Any] | None:
        """The reply opened, when it is `node`'s own answer to the envelope `sent`; None for
        any other: one that does not open, from another node (a copy of the envelope sent
        there), or to another envelope."""
        answer = self.verify("reply", reply, max_age_s)
        if not isinstance(answer, dict) or answer.get("by") != node:
            return None
        if answer.get(id_key) != envelope_id and answer.get("for") != digest(sent):
            return None
        return answer

    def take(self, purpose: str, data: bytes, id_key: str) -> dict[str, Any] | bytes | None:
        """A routed envelope opened and taken, its id remembered at once, so two copies
        delivered together run once. Otherwise, the sealed refusal to answer with (bytes),
        which names the envelope by its id, or by its digest when it did not open; or None,
        no answer at all, for a copy of an envelope already taken. Such a copy was not sent
        by its sender (which sends an envelope once): an answer to it would take the one
        answer NATS lets this node give to that reply subject, which belongs to the
        envelope's own result."""

        def refuse(envelope_id: Any, why: str) -> bytes:
            log.warning("cluster: refused a routed %s: %s", purpose, why)
            return self.reply({id_key: envelope_id, "refused": why, "for": digest(data)})

        opened = self.open(purpose, data, MAX_AGE_S)
        if opened is None or not isinstance(opened[0], dict):
            return refuse(None, "a bad or stale envelope (do the nodes share keys and clock?)")
        envelope, sealed_at = opened
        envelope_id = envelope.get(id_key)
        wait_s = envelope.get("wait_s")
        if not isinstance(envelope_id, str) or not isinstance(wait_s, int | float):
            return refuse(None, "a malformed envelope")
        closes_at = sealed_at + float(wait_s) + WINDOW_SLACK_S
        if closes_at < self._clock():
            return refuse(envelope_id, "sent too long ago")
        if envelope.get("to") != self.node_id:
            return refuse(envelope_id, "sent to another node")
        if envelope_id in self._taken:
            log.warning("cluster: ignored a copy of a routed %s already taken", purpose)
            return None
        if not self._remember(envelope_id, closes_at):
            return refuse(envelope_id, "too many routed calls in flight; retry")
        taken: dict[str, Any] = envelope
        return taken

    def forget(self, envelope_id: str) -> None:
        """Nothing was done for the envelope: its sender may send it again."""
        self._taken.pop(envelope_id, None)

    def _remember(self, envelope_id: str, closes_at: float) -> bool:
        """Remember an envelope until its window closes; False when too many are open."""
        now, taken = self._clock(), self._taken
        # Oldest first: the closed windows at the front go (one still open stops the
        # sweep, so a closed one behind it may stay a while longer; never the other way).
        # The window is read on the clock that refuses envelopes sent too long ago, so one
        # forgotten here is refused as that.
        while taken and next(iter(taken.values())) < now:
            taken.popitem(last=False)
        if len(taken) >= self._limit:
            return False
        taken[envelope_id] = closes_at
        return True
