"""Sealing what one node sends another over the bus: a reader without the gateway's keys
can neither read a message (a routed call's input, its result, a person's answer) nor make
or alter one.

A sealed message is AES-256-GCM over the message's JSON and the time it was sealed, under a
key derived (HKDF-SHA256) from one of the gateway's keys and the message's purpose (a call,
an errand, a reply, a broadcast), so a message sealed for one purpose does not open as
another. The newest key seals and every key opens, the rotation task tokens have.

Every node holds the same keys, as it must to verify every task's tokens: a node that is
taken over can read every node's messages, and could mint any task's tokens anyway, so a
key per node would protect nothing more. What keeps one node's credentials from another
node's messages on the bus is NATS's permissions (`subjects.py`); the seal keeps them from
whoever reads the bus without the keys.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# A format byte first, so that another may follow it one day.
FORMAT = b"\x01"
NONCE_BYTES = 12


class Unsealable(ValueError):
    """Not a message sealed with any of these keys for this purpose (forged, altered, from
    a cluster with other keys, or sealed for another purpose)."""


class Sealer:
    """Seals and opens the messages of one purpose with the gateway's keys, newest first."""

    def __init__(self, keys: list[str], purpose: str) -> None:
        if not keys:
            raise ValueError("sealing needs at least one key")
        self._aad = f"gateway.cluster.{purpose}".encode()
        self._ciphers = [AESGCM(_derive(key, self._aad)) for key in keys]

    def seal(self, value: Any, at: float | None = None) -> bytes:
        """`value` (JSON) and the time it is sealed (`at`, default now), sealed."""
        body = json.dumps(
            {"at": time.time() if at is None else at, "value": value}, separators=(",", ":")
        ).encode()
        # A random nonce per message: at 96 bits, repeats are out of reach for the
        # messages one key seals before it is rotated.
        nonce = os.urandom(NONCE_BYTES)
        return FORMAT + nonce + self._ciphers[0].encrypt(nonce, body, self._aad)

    def open(self, data: bytes) -> tuple[Any, float]:
        """The sealed value and when it was sealed; `Unsealable` if it is not one."""
        if not data.startswith(FORMAT) or len(data) < len(FORMAT) + NONCE_BYTES + 16:
            raise Unsealable("not a sealed message")
        nonce = data[len(FORMAT) : len(FORMAT) + NONCE_BYTES]
        sealed = data[len(FORMAT) + NONCE_BYTES :]
        for cipher in self._ciphers:
            try:
                body = cipher.decrypt(nonce, sealed, self._aad)
            except InvalidTag:
                continue
            opened = json.loads(body)
            return opened["value"], float(opened["at"])
        raise Unsealable("sealed with no key of this cluster, or for another purpose")


def _derive(key: str, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"gateway.cluster", info=info).derive(
        key.encode()
    )
