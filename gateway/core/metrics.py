"""Prometheus metrics of one gateway, in a registry of its own (several apps per process
in tests must not share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "gateway_tool_calls",
            "Tool calls by tool, door and terminal status",
            ["tool", "door", "status"],
            registry=self.registry,
        )
        self.call_seconds = Histogram(
            "gateway_tool_call_seconds",
            "Tool call latency through the pipeline",
            ["door"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.active_tasks = Gauge(
            "gateway_active_tasks",
            "Tasks created and not ended or expired",
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "gateway_auth_failures",
            "Rejected tokens by purpose and code",
            ["purpose", "code"],
            registry=self.registry,
        )
        # Calls turned away at once because a resource was overloaded (they ran nothing
        # and are retryable), by resource: `browser` (the task browser's action slots),
        # `tab` (a dashboard tab's UI actions: nothing was sent to the tab), `evidence`
        # (the store's writer, too far behind to record the call before its deadline).
        self.calls_shed = Counter(
            "gateway_calls_shed",
            "Calls refused as overloaded before they ran, by resource",
            ["resource"],
            registry=self.registry,
        )
        self.storage_failures = Counter(
            "gateway_storage_failures",
            "Evidence writes that failed",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
