"""What a call's evidence keeps of its input and output: never a secret, never a bulk copy.

- An input field the handler marked secret (a value typed into a password field, or one
  the caller marked secret) is kept as `[secret: N chars]`: what was done, not the value.
  An input model that knows its secret fields from the input alone says so
  (`secret_fields()`), so they are masked before the handler runs: in what a person is
  asked to approve, and in the evidence of a call refused before it ran.
- A string longer than the bound (a file written to the workspace, a page's text) is kept
  as its size and sha256: the record still says what was there, and a copy can be checked
  against it, without the database holding every byte of every write.

The redactor runs after this, on what is left.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from gateway.core.nested import Where, rebuilt

# A written file's body is the common large input; 4 KiB keeps any plain argument whole.
INPUT_TEXT_MAX = 4 * 1024
# A page snapshot (24,000 characters by default) stays whole; a file read back does not.
OUTPUT_TEXT_MAX = 64 * 1024


def secret(value: Any) -> str:
    length = len(value) if isinstance(value, str) else 0
    return f"[secret: {length} chars]"


def condensed(value: Any, limit: int) -> Any:
    """`value` with every string over `limit` characters replaced by its size and digest."""

    def shrunk(text: str, where: Where) -> Any:
        if len(text) <= limit:
            return text
        data = text.encode("utf-8", "surrogatepass")
        return {"omitted_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def beyond(deep: Any, where: Where) -> Any:
        # Below the bound a string is still condensed: no bulk copy hides under nesting.
        return shrunk(deep, where) if isinstance(deep, str) else deep

    return rebuilt(value, shrunk, beyond=beyond)


@runtime_checkable
class SecretInput(Protocol):
    """An input model whose secret fields follow from the input itself (a fill marked
    `secret: true`)."""

    def secret_fields(self) -> Iterable[str]: ...


def declared_secrets(args: object) -> set[str]:
    """The fields a validated input declares secret, known before its handler runs."""
    return set(args.secret_fields()) if isinstance(args, SecretInput) else set()


def masked(value: Any, secret_fields: Iterable[str]) -> Any:
    """`value` with its secret fields' values replaced by `[secret: N chars]`."""
    fields = set(secret_fields)
    if fields and isinstance(value, Mapping):
        return {k: secret(v) if k in fields else v for k, v in value.items()}
    return value


def recorded_input(value: Any, secret_fields: Iterable[str] = ()) -> Any:
    """A call's input as its evidence keeps it."""
    return condensed(masked(value, secret_fields), INPUT_TEXT_MAX)


def recorded_output(value: Any) -> Any:
    return condensed(value, OUTPUT_TEXT_MAX)


def input_digest(validated: Any) -> str:
    """The sha256 of a validated input in a canonical JSON form (keys sorted), so the same
    request sent again matches its first call whatever the order of its fields."""
    canonical = json.dumps(
        validated, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
