"""The bridge extension: installs the workspace tools, the task's bridge envelope, the
host dispatcher and host delegation into a gateway."""

from __future__ import annotations

from starlette.routing import BaseRoute

from gateway import workspace
from gateway.bridge import routes
from gateway.bridge.adapters import DelegationHosts, LocalRegistryAdapter
from gateway.bridge.delegation import DelegationService
from gateway.bridge.host import ParentToolHost
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.offer import task_extra
from gateway.http.edge import gateway_access
from gateway.runtime import Gateway


def install(gw: Gateway) -> list[BaseRoute]:
    workspace.install(gw)
    metrics = BridgeMetrics(gw.metrics.registry)
    hosts = gw.services.find(DelegationHosts)
    if hosts is None:
        hosts = DelegationHosts()
        gw.services.provide(DelegationHosts, hosts)
    if hosts.get(LocalRegistryAdapter.name) is None:
        hosts.add(LocalRegistryAdapter())
    gw.task_extras["parent_tool_bridge"] = task_extra(gw.registry, gw.settings.base_url)
    host = ParentToolHost(
        calls=gw.calls,
        registry=gw.registry,
        events=gw.events,
        store=gw.store,
        redactor=gw.redactor,
        data_dir=gw.settings.data_dir,
        metrics=metrics,
    )
    delegations = DelegationService(calls=gw.calls, events=gw.events, hosts=hosts, metrics=metrics)
    access = gateway_access(gw)
    return routes.routes(access, gw.settings.max_body_bytes, host, delegations)
