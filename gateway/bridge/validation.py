"""Envelope validation that always ends in a structured reason, never a stack trace.

Every envelope that crosses the bridge (from a sandbox, from a host adapter, from a
dispatcher's stdout) goes through `parse_envelope`: the schema id and the version are
checked first, so an unknown or future contract is named as such, then the fields. The
failure carries the field locations and messages only, never the offending input (it may
hold a secret).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.bridge.schemas import VERSION

E = TypeVar("E", bound=BaseModel)

MAX_ERRORS = 20


class EnvelopeInvalid(Exception):
    """An envelope that does not match its contract; `errors` says where."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []

    def diagnostics(self) -> dict[str, Any]:
        return {"errors": self.errors} if self.errors else {}


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in e["loc"]) or "$", "msg": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False)[:MAX_ERRORS]
    ]


def load_json(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise EnvelopeInvalid("the envelope is not valid JSON") from exc


def parse_envelope(model: type[E], data: Any, schema: str) -> E:
    """`data` as `model`, or EnvelopeInvalid saying what is wrong with it."""
    if not isinstance(data, dict):
        raise EnvelopeInvalid(f"a {schema} envelope must be a JSON object")
    got = data.get("schema")
    if got is None:
        raise EnvelopeInvalid(f"the envelope has no schema id; expected {schema!r}")
    if got != schema:
        shown = got[:128] if isinstance(got, str) else type(got).__name__
        raise EnvelopeInvalid(f"unknown schema id {shown!r}; expected {schema!r}")
    version = data.get("version")
    if type(version) is not int or version != VERSION:
        raise EnvelopeInvalid(
            f"unsupported {schema} version {str(version)[:32]!r}; expected {VERSION}"
        )
    try:
        # A lone surrogate (`"\\ud800"`, in a key or a value) is valid JSON but no UTF-8
        # record or answer can hold it.
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise EnvelopeInvalid(f"the {schema} envelope holds a lone surrogate") from None
    except (TypeError, ValueError, RecursionError):
        raise EnvelopeInvalid(f"the {schema} envelope is not plain JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = validation_errors(exc)
        first = errors[0] if errors else {"loc": "$", "msg": "invalid"}
        raise EnvelopeInvalid(
            f"the {schema} envelope is invalid at {first['loc']}: {first['msg']}", errors
        ) from None
