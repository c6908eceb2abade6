"""The composition root: build one gateway, and its Starlette app, from its settings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from gateway.bridge import install as bridge
from gateway.browser import install as browser
from gateway.cluster.joining import joining
from gateway.console import install as console
from gateway.core.errors import GatewayError
from gateway.http import health, tasks
from gateway.http.edge import gateway_error_handler
from gateway.http.hosts import HostGuard, HostPolicy
from gateway.http.no_store import NoStore
from gateway.mcp_door import install as mcp_door
from gateway.runtime import Gateway
from gateway.sandbox.extension import install as sandboxes
from gateway.settings import Settings
from gateway.tabs import install as tabs

Extension = Callable[[Gateway], Sequence[BaseRoute]]


def default_extensions() -> list[Extension]:
    """The adapters a full gateway installs, in order (the core routes come first)."""
    # Sandboxes before the browser: their part stops after the browser pool's, so no task
    # browser is left on an app that is gone.
    return [
        health.routes,
        tasks.routes,
        tabs,
        sandboxes,
        browser,
        bridge,
        mcp_door,
        console,
    ]


def build_gateway(settings: Settings) -> Gateway:
    """The gateway of `settings`: a node of the cluster they name, if they name one (its
    extensions then find the node's placement and routing already there)."""
    return Gateway(settings, cluster=joining(settings))


def build_app(
    settings: Settings | None = None,
    *,
    gateway: Gateway | None = None,
    extensions: Sequence[Extension] | None = None,
) -> Starlette:
    gw = gateway or build_gateway(settings or Settings())
    routes: list[BaseRoute] = []
    for install in extensions if extensions is not None else default_extensions():
        routes.extend(install(gw))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={GatewayError: gateway_error_handler},
        middleware=[
            Middleware(HostGuard, policy=HostPolicy.from_settings(gw.settings)),
            Middleware(NoStore),
        ],
    )
    app.state.gateway = gw
    return app
