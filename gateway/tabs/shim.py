"""`GET /webmcp.js`: the JS shim, served with CORS headers for the dashboard origins.

The one source of the files is `webmcp_js/` in the repository (`webmcp.js`, the modules it
imports, and the rules they apply, `tab-rules.js`, generated from the Python models); the
package carries them in `gateway/static/` (links in a checkout, copies in a built wheel),
read through importlib.resources so an installed gateway serves the same bytes.
`GET /webmcp.js` imports its siblings (`./actions.js`, `./tab-rules.js`, ...), each served
beside it with the same CORS headers.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.core.origins import origin_allowed

TS_TYPE = "application/typescript; charset=utf-8"
# Every module webmcp.js imports, directly or through another, must be here: a browser
# resolves `./name.js` against /webmcp.js.
SHIM_NAMES = (
    "webmcp.js",
    "webmcp.d.ts",
    "actions.js",
    "schema.js",
    "labels.js",
    "webmcp-tools.js",
    "tab-rules.js",
    "tab-rules.d.ts",
    "approval.js",
)


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
        serve(name, "text/javascript; charset=utf-8" if name.endswith(".js") else TS_TYPE)
        for name in SHIM_NAMES
    ]
