"""ASGI middleware: no answer of the API is kept by a cache on the way.

Answers of `/v1/...` carry tokens (a new task's), evidence and artifacts; a shared cache
or the browser's own must not keep them. `Cache-Control: no-store` is added wherever a
route did not choose its own caching (the shim, `/webmcp.js`, does).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_PREFIX = "/v1/"


class NoStore:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, sending)
