"""The running gateway: the one object that holds every part, built from settings.

Adapters (tab channels, browser pool, bridge, MCP) are extensions: each has an `install`
function that takes the `Gateway`, registers its tools and services, subscribes to task
ends, adds start/stop hooks, and returns its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from gateway.evidence_log import EventLog
from gateway.identity import TaskIdentity
from gateway.metrics import Metrics
from gateway.pipeline import Pipeline
from gateway.redaction import Redactor
from gateway.registry import Registry, Services
from gateway.settings import Settings
from gateway.store.database import Store
from gateway.tasks import TaskService
from gateway.tokens import Purpose, TokenService

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]
TaskExtra = Callable[[TaskIdentity, dict[str, str]], dict[str, Any]]


class Gateway:
    def __init__(self, settings: Settings) -> None:
        settings.ensure_secrets()
        assert settings.control_key is not None
        self.settings = settings
        self.metrics = Metrics()
        self.store = Store(
            settings.resolved_database_url(), settings.data_dir, synchronous=settings.db_synchronous
        )
        self.tokens = TokenService(settings.secret_keys)
        self.tasks = TaskService(
            self.store,
            self.tokens,
            ttl_by_purpose={
                Purpose.TAB: settings.tab_token_ttl_s,
                Purpose.AGENT: settings.agent_token_ttl_s,
                Purpose.BRIDGE: settings.bridge_token_ttl_s,
            },
            max_task_ttl_s=settings.max_task_ttl_s,
        )
        self.redactor = Redactor([*settings.secret_keys, settings.control_key])
        self.registry = Registry()
        self.services = Services()
        self.events = EventLog(
            self.store,
            self.redactor,
            quota=settings.evidence_max_events_per_task,
            metrics=self.metrics.registry,
        )
        self.pipeline = Pipeline(
            self.registry,
            self.tasks,
            self.store,
            self.services,
            self.redactor,
            self.metrics,
            self.events,
        )
        self.tasks.on_end(self.pipeline.forget)
        self.tasks.on_end(self.events.task_ended)
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._contexts: list[Callable[[], AbstractAsyncContextManager[Any]]] = []
        self._stack: contextlib.AsyncExitStack | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.sweep_interval_s = 2.0  # how soon an expired task's tab and browser are let go
        # Extra fields of `POST /v1/tasks`' answer, e.g. `parent_tool_bridge`.
        self.task_extras: dict[str, TaskExtra] = {}
        # Extra fields of `GET /v1/tasks/{id}`, e.g. `tab` and `browser` state.
        self.task_probes: dict[str, Callable[[str], Any]] = {}

    def on_startup(self, hook: Hook) -> None:
        self._startup.append(hook)

    def on_shutdown(self, hook: Hook) -> None:
        self._shutdown.append(hook)

    def run_during(self, factory: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        """An async context entered at start and left at stop (e.g. MCP's session manager)."""
        self._contexts.append(factory)

    async def start(self) -> None:
        await self.store.start()
        await self.tasks.load()
        self._stack = contextlib.AsyncExitStack()
        for factory in self._contexts:
            await self._stack.enter_async_context(factory())
        for hook in self._startup:
            await hook()
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="task-sweeper")

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.tasks.sweep()
            except Exception:
                log.exception("the task sweep failed")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None
        for hook in reversed(self._shutdown):
            try:
                await hook()
            except Exception:
                log.exception("a shutdown hook failed")
        await self.events.flush()
        await self.store.close()
