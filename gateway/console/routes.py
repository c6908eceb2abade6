"""The console's routes under `/console`: pages, their live data, answers to approvals,
artifacts, the trace viewer and the export, each part in a module of its own; every one
but signing in and the console's own files asks `Guard` who is looking first."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.console import answers, downloads, sign_in, task_list, task_view
from gateway.console.guard import Guard
from gateway.console.links import BASE, STATIC
from gateway.core.errors import NotFound
from gateway.runtime import Gateway

STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}


async def _static(request: Request) -> Response:
    name = request.path_params["name"]
    path = STATIC / name
    if name not in {p.name for p in STATIC.iterdir()} or path.suffix not in STATIC_TYPES:
        raise NotFound("no such file")
    return FileResponse(path, media_type=STATIC_TYPES[path.suffix])


def routes(gw: Gateway) -> list[BaseRoute]:
    guard = Guard(gw)
    return [
        *task_list.routes(guard),
        *sign_in.routes(guard),
        Route(f"{BASE}/static/{{name}}", _static, methods=["GET"]),
        *task_view.routes(guard),
        *answers.routes(guard),
        *downloads.routes(guard),
    ]
