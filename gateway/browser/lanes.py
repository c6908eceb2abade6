"""Each browser process's lanes of admission (`admission.py`): one for actions, and one for
snapshots, which only read a page, so a task's snapshot never queues behind another task's
navigate. By slot index: a relaunched Chromium (a reconnected server) takes its place,
queue and average.
"""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.parts import BrowserPoolConfig

from .admission import Admission


class ProcessLanes:
    """The lanes of `count` process slots, with the slots and queue bounds of `config`;
    `shed` counts the calls turned away."""

    def __init__(self, config: BrowserPoolConfig, count: int, shed: Counter | None) -> None:
        self.actions = [lane(config.actions_per_process, config, shed) for _ in range(count)]
        # 0 reads per process: snapshots share the actions' lane.
        self.reads = (
            [lane(config.reads_per_process, config, shed) for _ in self.actions]
            if config.reads_per_process
            else self.actions
        )

    def measure(self, metrics: CollectorRegistry) -> None:
        """The calls waiting in each process's lanes, as gauges of `metrics`."""
        for name, about, lanes in (
            ("gateway_browser_queue", "Browser calls waiting for an action slot", self.actions),
            ("gateway_browser_read_queue", "Snapshots waiting for a read slot", self.reads),
        ):
            queue = Gauge(name, f"{about}, per Chromium process", ["process"], registry=metrics)
            for index, admission in enumerate(lanes):
                queue.labels(str(index)).set_function(partial(_queued, admission))


def lane(slots: int, config: BrowserPoolConfig, shed: Counter | None) -> Admission:
    """The admission of one of a process's lanes: `slots` at once, the queue bounded as
    the config says, each call turned away counted."""
    return Admission(
        slots,
        max_waiting=(None if config.waiting_per_slot is None else slots * config.waiting_per_slot),
        on_shed=shed.inc if shed is not None else None,
    )


def _queued(admission: Admission) -> float:
    return float(admission.queued)
