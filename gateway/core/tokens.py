"""Signed, short-lived, single-purpose task tokens.

Layered on itsdangerous: a URL-safe timed serializer with one salt per purpose, so a token
minted as `tab` cannot be replayed as `agent` or `bridge` (its signature does not verify
under another salt). Keys rotate through a list, newest first: the newest signs, every key
verifies. The payload names the task, a token id and an expiry; whether the task still
exists and has not ended is checked by the task service, against the store.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from itsdangerous.timed import TimestampSigner

from gateway.core.errors import AuthError, TokenExpired

Clock = Callable[[], float]


class Purpose(StrEnum):
    TAB = "tab"
    AGENT = "agent"
    BRIDGE = "bridge"


@dataclass(frozen=True)
class TokenClaims:
    task_id: str
    token_id: str
    purpose: Purpose
    expires_at: float


def new_key() -> str:
    """A fresh signing key: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


class TokenService:
    def __init__(self, keys: Sequence[str] = (), *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._serializers: dict[Purpose, URLSafeTimedSerializer] = {}
        if keys:
            self.use_keys(keys)

    def use_keys(self, keys: Sequence[str]) -> None:
        """Sign with the first of `keys` (newest first), verify with all of them."""
        if not keys or any(len(k) < 16 for k in keys):
            raise ValueError("at least one signing key of 16 or more characters is needed")
        clock_fn = self._clock

        class _Signer(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(clock_fn())

        # itsdangerous signs with the last key of the list and verifies with all of them,
        # newest first; the setting lists keys newest first, hence the reversal.
        ordered = list(reversed(list(keys)))
        self._serializers = {
            purpose: URLSafeTimedSerializer(
                ordered,
                salt=f"gateway.task-token.{purpose.value}",
                signer=_Signer,
                signer_kwargs={"digest_method": hashlib.sha256},
            )
            for purpose in Purpose
        }

    def _serializer(self, purpose: Purpose) -> URLSafeTimedSerializer:
        serializer = self._serializers.get(purpose)
        if serializer is None:
            raise AuthError("no signing key yet: the gateway is not started")
        return serializer

    def mint(self, task_id: str, purpose: Purpose, ttl_s: float) -> tuple[str, TokenClaims]:
        now = self._clock()
        claims = TokenClaims(
            task_id=task_id,
            token_id=secrets.token_hex(8),
            purpose=purpose,
            expires_at=float(int(now + ttl_s)),
        )
        payload = {"t": claims.task_id, "j": claims.token_id, "e": int(claims.expires_at)}
        token = self._serializer(purpose).dumps(payload)
        return str(token), claims

    def verify(self, token: str, purpose: Purpose) -> TokenClaims:
        """Signature, purpose and age; raises AuthError (401) on any failure."""
        # Tokens are URL-safe ASCII; anything else (a lone surrogate would not even encode)
        # is refused before it reaches the signer.
        if not token or len(token) > 2048 or not token.isascii():
            raise AuthError("missing or malformed token")
        try:
            payload: Any = self._serializer(purpose).loads(token)
        except BadSignature as exc:
            raise AuthError(f"token is not a valid {purpose.value} token") from exc
        if (
            not isinstance(payload, dict)
            or not isinstance(payload.get("t"), str)
            or not isinstance(payload.get("j"), str)
            or not isinstance(payload.get("e"), int)
        ):
            raise AuthError("token payload is malformed")
        if self._clock() >= payload["e"]:
            raise TokenExpired()
        return TokenClaims(
            task_id=payload["t"],
            token_id=payload["j"],
            purpose=purpose,
            expires_at=float(payload["e"]),
        )
