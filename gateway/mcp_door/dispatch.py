"""Which of the SDK's two transports serves an (authenticated) MCP request.

Measured (docs/mcp.md): answering a 2026-07-28 request in the SDK's JSON-response mode
is cheaper than its SSE-capable mode, which starts a task group, a memory stream and a
deferral timer for every request. JSON mode, though, cannot carry progress notifications,
and the SDK watches for a client hanging up (the 2026 protocol's way to cancel) only in
SSE mode. So:

- a 2026-07-28 POST that asks for no progress (no `progressToken` anywhere in its body) is
  served in JSON mode, with a watcher here that cancels the exchange if the client hangs
  up before the answer, so cancellation still reaches the tool handler;
- everything else (progress asked for, GET streams, DELETE, and every request of the
  handshake protocol versions, whose sessions live in one manager) goes to the
  SSE-capable, session-keeping manager.
"""

from __future__ import annotations

import anyio
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.errors import PayloadTooLarge
from gateway.http.edge import error_response

PROTOCOL_HEADER = b"mcp-protocol-version"
PROGRESS_MARK = b'"progressToken"'
_MODERN = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)


class TransportDispatch:
    def __init__(self, streaming: ASGIApp, json_only: ASGIApp, *, max_body_bytes: int) -> None:
        self.streaming = streaming
        self.json_only = json_only
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST" or not is_modern(scope):
            await self.streaming(scope, receive, send)
            return
        body = await self._read_body(receive)
        if body is None:
            exc = PayloadTooLarge(f"body is larger than {self.max_body_bytes} bytes")
            await error_response(exc)(scope, receive, send)
            return
        replay = _replaying(body, receive)
        if PROGRESS_MARK in body:
            await self.streaming(scope, replay, send)
            return
        await _until_hang_up(self.json_only, scope, replay, receive, send)

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def is_modern(scope: Scope) -> bool:
    """Whether the request speaks the per-request (2026-07-28) protocol: no session."""
    for name, value in scope["headers"]:
        if name == PROTOCOL_HEADER:
            return value in _MODERN
    return False


def _replaying(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _until_hang_up(
    app: ASGIApp, scope: Scope, replay: Receive, receive: Receive, send: Send
) -> None:
    """Run one JSON exchange; if the client disconnects first, cancel it (and its handler)."""
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            # The body is already read, so the next message is the end of the exchange:
            # the server sends it once the response is complete, or on a hang-up before.
            await receive()
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await app(scope, replay, send)
        group.cancel_scope.cancel()
