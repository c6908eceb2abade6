"""`GET /webmcp.js`: the JS shim, served with CORS headers for the dashboard origins.

The one source of the file is `webmcp_js/webmcp.js` in the repository; the package carries
it as `gateway/static/webmcp.js` (a link in a checkout, a copy in a built wheel), and it is
read through importlib.resources so an installed gateway serves the same bytes.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.origins import origin_allowed

SHIM_NAMES = ("webmcp.js", "webmcp.d.ts")


@lru_cache(maxsize=4)
def shim_source(name: str = "webmcp.js") -> bytes:
    return resources.files("gateway").joinpath("static", name).read_bytes()


def routes(dashboard_origins: list[str]) -> list[BaseRoute]:
    allowed = set(dashboard_origins)

    def cors(request: Request) -> dict[str, str]:
        headers = {"Vary": "Origin", "X-Content-Type-Options": "nosniff"}
        origin = request.headers.get("origin")
        if origin_allowed(origin, allowed):
            headers["Access-Control-Allow-Origin"] = str(origin)
        return headers

    def serve(name: str, media_type: str) -> Route:
        async def handler(request: Request) -> Response:
            body = shim_source(name)
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            headers = {**cors(request), "ETag": etag, "Cache-Control": "no-cache"}
            if request.method == "OPTIONS":
                headers["Access-Control-Allow-Methods"] = "GET"
                return Response(status_code=204, headers=headers)
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers=headers)
            return Response(body, media_type=media_type, headers=headers)

        return Route(f"/{name}", handler, methods=["GET", "OPTIONS"])

    return [
        serve("webmcp.js", "text/javascript; charset=utf-8"),
        serve("webmcp.d.ts", "application/typescript; charset=utf-8"),
    ]
