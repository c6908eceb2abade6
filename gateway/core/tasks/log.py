"""What happens around a task that its agent may want to hear as it happens: a log.

Parts publish (`publish(task_id, level, logger, data)`): the task browser its pages'
console errors and uncaught errors, the tab hub its tab connecting and disconnecting.
Doors subscribe per task: the MCP door forwards them as `notifications/message` to the
task's sessions that asked with `logging/setLevel`. Nothing is kept: a message nobody
listens for is gone, and a subscriber that fails is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

log = logging.getLogger(__name__)

Level = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LEVELS: tuple[Level, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
Listener = Callable[[Level, str, dict[str, Any]], Awaitable[None]]


def at_least(level: Level, floor: Level) -> bool:
    return LEVELS.index(level) >= LEVELS.index(floor)


class TaskLog:
    def __init__(self) -> None:
        self._listeners: dict[str, dict[object, Listener]] = {}
        self._sending: set[asyncio.Future[None]] = set()

    def subscribe(self, task_id: str, key: object, listener: Listener) -> None:
        """`listener` hears the task's messages (one per `key`: a second replaces it)."""
        self._listeners.setdefault(task_id, {})[key] = listener

    def unsubscribe(self, task_id: str, key: object) -> None:
        listeners = self._listeners.get(task_id)
        if listeners is not None:
            listeners.pop(key, None)
            if not listeners:
                del self._listeners[task_id]

    def listened(self, task_id: str) -> bool:
        return bool(self._listeners.get(task_id))

    def publish(self, task_id: str, level: Level, logger: str, data: dict[str, Any]) -> None:
        """Send a message to the task's listeners, without waiting for them."""
        for key, listener in list(self._listeners.get(task_id, {}).items()):
            future = asyncio.ensure_future(
                self._deliver(task_id, key, listener, level, logger, data)
            )
            self._sending.add(future)
            future.add_done_callback(self._sending.discard)

    async def _deliver(
        self,
        task_id: str,
        key: object,
        listener: Listener,
        level: Level,
        logger: str,
        data: dict[str, Any],
    ) -> None:
        try:
            await listener(level, logger, data)
        except Exception as exc:  # a gone listener is dropped, never retried
            log.debug("a task log listener of %s is gone: %r", task_id, exc)
            self.unsubscribe(task_id, key)

    async def task_ended(self, task_id: str, _reason: str) -> None:
        self._listeners.pop(task_id, None)
