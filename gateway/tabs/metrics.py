"""The tab channel's metrics: refused frames and handshakes, requests by outcome, tabs
connected."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.tabs.actions import UIAction
from gateway.tabs.outcome import TabOutcome


class TabMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # Labelled children, looked up once: `labels()` costs more than the count itself.
        self._request_counters: dict[tuple[str, str], Any] = {}
        self.rejected = Counter(
            "gateway_tab_frames_rejected",
            "Frames from dashboard tabs the channel refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.refused = Counter(
            "gateway_tab_handshakes_refused",
            "Tab channel handshakes refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "gateway_tab_requests",
            "UI action requests sent to tabs, by terminal status",
            ["action", "status"],
            registry=registry,
        )
        self.connections = Gauge(
            "gateway_tab_connections", "Dashboard tabs connected now", registry=registry
        )

    def count(self, action: UIAction, outcome: TabOutcome) -> TabOutcome:
        """Count a request's terminal outcome; returns it."""
        key = (action.type, outcome.status.value)
        counter = self._request_counters.get(key)
        if counter is None:
            counter = self._request_counters[key] = self.requests.labels(*key)
        counter.inc()
        return outcome
