"""HTTP doors of the bridge: `POST /v1/parent-tools` (bridge token) and
`POST /v1/delegations` (agent token).

Every answer is an envelope of the route's result schema, failures included: its top
level `error {code, message, retryable}` is also the gateway's usual error body, so a
client that only knows the HTTP contract reads it the same way. HTTP status: 401 for a
missing, bad, expired or revoked token (a token of another purpose is bad), 413 for an
oversized body, 422 for a body that is not a valid request envelope, 503 with
`Retry-After` (seconds) for a parent-tool call turned away as `overloaded` (it ran
nothing; ask again then), and 200 for every other request that was decided, whatever the
envelope's status says.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.delegation import DelegationService
from gateway.bridge.delegation_envelopes import delegation_failure
from gateway.bridge.envelopes import failure
from gateway.bridge.host import ParentToolHost, retry_after
from gateway.bridge.schemas import DELEGATIONS_PATH, PARENT_TOOLS_PATH
from gateway.core.errors import AuthError, GatewayError
from gateway.core.tokens import Purpose
from gateway.http.edge import Access, bearer, read_json


def _reply(status: int, body: dict[str, Any], retry_after_s: int | None = None) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    return JSONResponse(body, status_code=status, headers=headers or None)


def routes(
    access: Access, max_body_bytes: int, host: ParentToolHost, delegations: DelegationService
) -> list[BaseRoute]:
    async def parent_tools(request: Request) -> Response:
        try:
            identity = await access.task_identity(request, Purpose.BRIDGE)
        except AuthError as exc:
            return _reply(401, failure("denied", str(exc.code), exc.message).wire())
        try:
            body = await read_json(request, max_body_bytes)
        except GatewayError as exc:
            result = failure("failed", str(exc.code), exc.message)
            return _reply(exc.http_status, result.wire())
        status, result = await host.handle(identity, bearer(request), body)
        return _reply(status, result.wire(), retry_after(result) if status == 503 else None)

    async def delegate(request: Request) -> Response:
        try:
            identity = await access.task_identity(request, Purpose.AGENT)
        except AuthError as exc:
            return _reply(401, delegation_failure(str(exc.code), exc.message).wire())
        try:
            body = await read_json(request, max_body_bytes)
        except GatewayError as exc:
            return _reply(exc.http_status, delegation_failure(str(exc.code), exc.message).wire())
        status, result = await delegations.handle(identity, body)
        return _reply(status, result.wire())

    return [
        Route(PARENT_TOOLS_PATH, parent_tools, methods=["POST"]),
        Route(DELEGATIONS_PATH, delegate, methods=["POST"]),
    ]
