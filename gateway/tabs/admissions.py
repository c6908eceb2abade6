"""How many UI actions each task's tab is sent at once, and what waits for a place.

Each task's tab has an `Admission` (`gateway/core/admission.py`) of
`TabConfig.actions_at_once` places and a queue of `TabConfig.actions_waiting`. An action
that could not be answered before its deadline (by the running average of the tab's
recent round trips), or that finds the queue full, ends at once `unavailable`/`overloaded`,
retryable, with `details.retry_after_s`, and nothing is sent to the tab.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.core.admission import Admission
from gateway.core.errors import ToolFailure
from gateway.tabs.config import TabConfig
from gateway.tabs.outcome import TabOutcome, failure

# The round trip assumed for a tab until one is measured (the shim answers in about a
# millisecond; a page's own handler may take longer). It only matters while every place
# is taken before any action came back.
FIRST_ROUND_TRIP_S = 0.1
# What an action needs besides its round trip (the reply's checks, the calling tool's
# evidence and answer): an action that cannot keep this much before its deadline waits no
# longer for its turn.
REPLY_MARGIN_S = 0.05


class Admissions(dict[str, Admission]):
    """The admission of each task's tab, by task id; made on the tab's first action."""

    def __init__(self, config: TabConfig, on_shed: Callable[[], None] | None) -> None:
        super().__init__()
        self._config = config
        self._on_shed = on_shed

    def of(self, task_id: str) -> Admission:
        admission = self.get(task_id)
        if admission is None:
            config = self._config
            admission = self[task_id] = Admission(
                config.actions_at_once,
                max_waiting=config.actions_waiting,
                first_guess_s=FIRST_ROUND_TRIP_S,
                run_margin_s=REPLY_MARGIN_S,
                what="the dashboard tab",
                unit="UI actions",
                on_shed=self._on_shed,
            )
        return admission

    def waiting(self, task_id: str) -> int:
        """UI actions of the task waiting for their turn at the tab (not sent to it yet)."""
        admission = self.get(task_id)
        return admission.queued if admission is not None else 0

    def let_go(self, task_id: str) -> None:
        """Forget the tab's admission (its measured round trips) once no action holds or
        waits for a place."""
        admission = self.get(task_id)
        if admission is not None and admission.idle:
            del self[task_id]


def shed(request_id: str, refused: ToolFailure) -> TabOutcome:
    """The outcome of an action the tab's admission turned away: nothing was sent."""
    return failure(
        request_id,
        refused.tool_status,
        refused.code,
        refused.message,
        retryable=refused.retryable,
        details=refused.details,
    )
