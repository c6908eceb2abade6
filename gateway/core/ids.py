"""The ids the gateway gives what it makes: a kind's prefix and 80 random bits, so a record,
an approval, an artifact or a tab's request is told apart by its id alone."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"
