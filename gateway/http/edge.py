"""Shared pieces of the HTTP edge: bounded JSON bodies, bearer credentials, error bodies."""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.core.errors import AuthError, GatewayError, InvalidInput, NotFound, PayloadTooLarge
from gateway.core.identity import TaskIdentity
from gateway.core.ports import TaskLookup
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def error_response(exc: GatewayError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
    return JSONResponse(exc.to_json(), status_code=exc.http_status, headers=headers)


async def gateway_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def read_body(request: Request, limit: int, what: str = "body") -> bytes:
    """The request's body, refused (413) as soon as it is known to be over `limit` bytes:
    by its declared length, or as it arrives, never read whole first."""
    too_large = PayloadTooLarge(f"{what} is larger than {limit} bytes")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, refusing more than `limit` bytes before reading them all."""
    raw = await read_body(request, limit)
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput("body is not valid JSON") from exc
    # `"\ud800"` parses to a lone surrogate, which no UTF-8 answer or record can hold: an
    # envelope echoing it made its reply fail with a 500. Only bodies with such an escape
    # pay for the check.
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise InvalidInput("body is not valid JSON: it has a lone surrogate") from None
    return value


M = TypeVar("M", bound=BaseModel)


def parse_body(model: type[M], body: Any, message: str) -> M:
    """A JSON body as `model`, or 422 with `message` and where each error is."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise InvalidInput(message, details={"errors": errors}) from None


_DIGITS = re.compile(r"[0-9]{1,15}")


def query_int(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    """A query parameter as an integer in [low, high]: ASCII digits only (not `٣`, `+1`,
    `1_0` or 30 digits), or 422."""
    text = request.query_params.get(name)
    if text is None:
        return default
    if not _DIGITS.fullmatch(text):
        raise InvalidInput(f"{name} must be a whole number of at most 15 digits")
    return min(max(int(text), low), high)


def credential(request: Request) -> str:
    """The request's bearer credential, or "" when it has none."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def bearer(request: Request) -> str:
    value = credential(request)
    if not value:
        raise AuthError("an Authorization: Bearer credential is required")
    return value


@dataclass(frozen=True)
class Access:
    """Who is asking: the control plane (its key) or one task (its token)."""

    control_key: Callable[[], str | None]  # read when asked: generated at start
    tasks: TaskLookup

    def is_control(self, credential: str) -> bool:
        expected = self.control_key() or ""
        # Constant time, on bytes, so neither content nor a shared prefix leaks through
        # timing; no key (not started) matches nothing.
        return bool(expected) and hmac.compare_digest(credential.encode(), expected.encode())

    def require_control(self, request: Request) -> None:
        if not self.is_control(bearer(request)):
            raise AuthError("the control-plane key is required")

    async def task_identity(
        self, request: Request, purpose: Purpose = Purpose.AGENT
    ) -> TaskIdentity:
        return await self.tasks.authenticate(credential(request), purpose)

    async def task_reader(self, request: Request, task_id: str) -> TaskIdentity | None:
        """Control key (None: may read any task) or the agent token of exactly this task.

        A token of another task gets 404, as if the task did not exist: a caller learns
        nothing about tasks it does not own.
        """
        if self.is_control(bearer(request)):
            return None
        identity = await self.task_identity(request)
        if identity.task_id != task_id:
            raise NotFound("no such task")
        return identity

    async def task_member(self, request: Request, task_id: str) -> TaskIdentity | None:
        """Like `task_reader`, but any of the task's tokens will do (tab, agent, bridge): the
        people and programs of one task may all read what it is waiting for."""
        if self.is_control(bearer(request)):
            return None
        token = credential(request)
        purpose = Purpose.AGENT
        for candidate in Purpose:
            try:
                self.tasks.claims(token, candidate)
            except AuthError:
                continue
            purpose = candidate
            break
        identity = await self.tasks.authenticate(token, purpose)
        if identity.task_id != task_id:
            raise NotFound("no such task")
        return identity


def gateway_access(gw: Gateway) -> Access:
    """The gateway's one `Access`, shared by every door that asks who is calling: made the
    first time one asks, with the control key read from the settings when a request comes
    (it is generated at start)."""
    access = gw.services.find(Access)
    if access is None:
        access = Access(lambda: gw.settings.control_key, gw.tasks)
        gw.services.provide(Access, access)
    return access
