"""A reverse proxy that adds one bearer token to every request, for clients that cannot
send one themselves (the MCP conformance suite): everything else passes through as sent,
`Host` and `Origin` included, and answers stream back as they come."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "content-length"}


class BearerProxy:
    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(120.0))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() != "authorization"
        ]
        headers.append(("authorization", f"Bearer {self.token}"))
        url = (
            self.upstream
            + scope["path"]
            + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        )
        upstream = self.client.build_request(
            request.method, url, headers=headers, content=await request.body()
        )
        answer = await self.client.send(upstream, stream=True)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        passed: dict[str, Any] = {
            k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP
        }
        response = StreamingResponse(body(), status_code=answer.status_code, headers=passed)
        await response(scope, receive, send)

    async def aclose(self) -> None:
        await self.client.aclose()
