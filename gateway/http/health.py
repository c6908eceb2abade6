"""Liveness and Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway import __version__
from gateway.runtime import Gateway


def routes(gw: Gateway) -> list[BaseRoute]:
    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    async def metrics(_request: Request) -> Response:
        gw.metrics.active_tasks.set(gw.tasks.active_count())
        return Response(gw.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return [Route("/healthz", healthz), Route("/metrics", metrics)]
