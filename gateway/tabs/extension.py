"""Installing the tab channel into a gateway: services, tools, hooks and routes."""

from __future__ import annotations

from starlette.routing import BaseRoute, WebSocketRoute

from gateway.runtime import Gateway
from gateway.tabs import shim
from gateway.tabs.config import TabConfig
from gateway.tabs.endpoint import endpoint
from gateway.tabs.hub import TabHub
from gateway.tabs.tools import register_ui_tools
from gateway.tabs.views import Views


def install(gw: Gateway) -> list[BaseRoute]:
    views = gw.services.find(Views)
    if views is None:
        views = Views()
        gw.services.provide(Views, views)
    hub = TabHub(
        calls=gw.calls,
        catalog=gw.registry,
        events=gw.events,
        metrics=gw.metrics.registry,
        views=views,
        config=gw.services.find(TabConfig),
        log=gw.task_log.publish,
        desk=gw.approvals,
        on_shed=gw.metrics.calls_shed.labels(resource="tab").inc,
    )
    gw.services.provide(TabHub, hub)
    register_ui_tools(gw.registry)
    gw.registry.on_change(hub.catalog_changed)
    gw.tasks.on_end(hub.task_ended)
    gw.approvals.on_change(lambda request: hub.approval_changed(request.task_id, request.shown()))
    if gw.placement is not None:
        gw.placement.on_release(hub.task_moved)
    gw.add_part("tab channels", start=hub.start, stop=hub.stop)
    gw.task_probes["tab"] = hub.describe
    return [
        WebSocketRoute(
            "/v1/tabs",
            endpoint(
                hub,
                gw.tasks,
                gw.settings.dashboard_origins,
                take=gw.placement.take if gw.placement is not None else None,
            ),
        ),
        *shim.routes(gw.settings.dashboard_origins),
    ]
