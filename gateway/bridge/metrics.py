"""Prometheus counters of the bridge and of host delegation, in the gateway's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class BridgeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gateway_parent_tool_requests",
            "Parent tool bridge requests by terminal status and error code",
            ["status", "code"],
            registry=registry,
        )
        self.delegations = Counter(
            "gateway_host_delegations",
            "Host delegations by terminal status and error code",
            ["status", "code"],
            registry=registry,
        )
