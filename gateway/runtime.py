"""The running gateway: the one object that holds every part, built from settings.

Adapters (tab channels, browser pool, bridge, MCP) are extensions: each has an `install`
function that takes the `Gateway`, registers its tools and services, subscribes to task
ends, adds the parts it runs (`add_part`) and returns its routes.

A gateway that is one node of a cluster is told so when it is built (`cluster`, the
`Cluster` port, gateway/cluster/joining.py): its pipeline is built with the node's fencing,
and `placement` and `calls` are the node's before any extension is installed.

One lifetime: `start` enters the store, then every part in the order they were added, on
one exit stack; `stop` leaves them in reverse. A part whose start fails unwinds every part
started before it, so a gateway is either running whole or not at all. Nothing is written
to disk before `start` (the generated keys included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.approvals.broker import Approvals
from gateway.core.approvals.prompt import PROMPT_TOOL
from gateway.core.evidence import EventLog
from gateway.core.identity import TaskIdentity
from gateway.core.metrics import Metrics
from gateway.core.pipeline import Pipeline
from gateway.core.ports import NO_FENCING, CallRunner, Fencing, Placement
from gateway.core.redaction import Redactor
from gateway.core.registry import Registry, Services
from gateway.core.store.database import Store
from gateway.core.store.objects import object_store
from gateway.core.tasks.log import TaskLog
from gateway.core.tasks.service import TaskService
from gateway.core.tokens import TokenService
from gateway.parts import approvals_config, evidence_config, store_config, tasks_config
from gateway.settings import Settings

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]
PartContext = Callable[[], AbstractAsyncContextManager[Any]]
TaskExtra = Callable[[TaskIdentity, dict[str, str]], dict[str, Any]]


@dataclass(frozen=True)
class Part:
    """Something that runs while the gateway does, entered at start and left at stop."""

    name: str
    context: PartContext


def hooks(start: Hook | None = None, stop: Hook | None = None) -> PartContext:
    """A part made of a start and a stop (the stop runs only if the start returned)."""

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        if start is not None:
            await start()
        try:
            yield
        finally:
            if stop is not None:
                await stop()

    return running


class Node(Placement, Protocol):
    """A node of a cluster as its gateway holds it: the `Placement` its parts ask, the call
    runner its doors are given, its lifetime (a part) and where it says a task lives."""

    @property
    def calls(self) -> CallRunner: ...

    def running(self) -> AbstractAsyncContextManager[None]: ...

    def describe(self, task_id: str) -> dict[str, Any]: ...


class Cluster(Protocol):
    """The cluster a gateway is built as a node of: the fencing its pipeline is built with,
    then the node, made of that pipeline and the task service."""

    @property
    def fencing(self) -> Fencing: ...

    def node(self, tasks: TaskService, pipeline: Pipeline) -> Node: ...


class Gateway:
    def __init__(self, settings: Settings, *, cluster: Cluster | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.store = Store(
            store_config(settings),
            objects=object_store(
                settings.data_dir, settings.artifacts_url, settings.artifacts_endpoint_url
            ),
        )
        self.tokens = TokenService(settings.secret_keys)
        self.tasks = TaskService(
            self.store,
            self.tokens,
            tasks_config(settings),
            auth_failures=self.metrics.auth_failures,
        )
        self.redactor = Redactor(
            [*settings.secret_keys, *([settings.control_key] if settings.control_key else [])]
        )
        self.registry = Registry([PROMPT_TOOL])
        self.services = Services()
        self.events = EventLog(
            self.store,
            self.redactor,
            evidence_config(settings),
            metrics=self.metrics.registry,
        )
        self.approvals = Approvals(self.store, self.events, approvals_config(settings))
        self.pipeline = Pipeline(
            self.registry,
            self.tasks,
            self.store,
            self.services,
            self.redactor,
            self.metrics,
            self.events,
            self.approvals,
            # A node's side effects are fenced to the tasks it owns; a single gateway's,
            # to nothing.
            fencing=cluster.fencing if cluster is not None else NO_FENCING,
        )
        self.task_log = TaskLog()
        self.tasks.on_end(self.pipeline.forget)
        self.tasks.on_end(self.events.task_ended)
        self.tasks.on_end(self.task_log.task_ended)
        self.tasks.on_end(self.approvals.task_ended)
        self._parts: list[Part] = []
        self._stack: contextlib.AsyncExitStack | None = None
        self.sweep_interval_s = 2.0  # how soon an expired task's tab and browser are let go
        # Extra fields of `POST /v1/tasks`' answer, e.g. `parent_tool_bridge`.
        self.task_extras: dict[str, TaskExtra] = {}
        # Extra fields of `GET /v1/tasks/{id}`, e.g. `tab` and `browser` state.
        self.task_probes: dict[str, Callable[[str], Any]] = {}
        # What the doors run calls with, and where a task lives: the pipeline itself and
        # None on a single gateway; on a node of a cluster, the routing that runs each call
        # on its task's owner, and the node.
        self.calls: CallRunner = self.pipeline
        self.placement: Placement | None = None
        if cluster is not None:
            node = cluster.node(self.tasks, self.pipeline)
            self.calls, self.placement = node.calls, node
            # A person's answer reaches the node that asks; a node that lost the task closes
            # its questions, and the call that asked ends.
            node.on_release(lambda task_id: self.approvals.task_ended(task_id, "moved"))
            # The first part: it starts before, and stops after, every extension's.
            self.add_part("cluster node", context=node.running)
            self.task_probes["node"] = node.describe

    def add_part(
        self,
        name: str,
        *,
        start: Hook | None = None,
        stop: Hook | None = None,
        context: PartContext | None = None,
    ) -> None:
        """Run a part with the gateway: a `start` and `stop` pair, or an async `context`."""
        if (context is None) == (start is None and stop is None):
            raise ValueError(f"part {name!r}: give either start/stop or a context")
        self._parts.append(Part(name, context or hooks(start, stop)))

    @property
    def parts(self) -> list[str]:
        return [part.name for part in self._parts]

    async def start(self) -> None:
        if self._stack is not None:
            raise RuntimeError("the gateway is already started")
        stack = contextlib.AsyncExitStack()
        try:
            # Keys generated now, not when the gateway object was built.
            self.settings.ensure_secrets()
            self.tokens.use_keys(self.settings.secret_keys)
            for secret in (*self.settings.secret_keys, self.settings.control_key or ""):
                self.redactor.add_secret(secret)
            await stack.enter_async_context(self.store)
            await self.tasks.load()
            if not self.settings.clustered:
                # A node of a cluster shares the table: the approvals left by a node are
                # closed when its tasks are freed (gateway/cluster/ledger.py).
                await self.approvals.recover()
            # Left before the store closes: the last aggregates of task events are written.
            stack.push_async_callback(self.events.flush)
            for part in [*self._parts, Part("task sweeper", self._sweeping)]:
                try:
                    await stack.enter_async_context(part.context())
                except BaseException:
                    log.error("the gateway's part %r did not start; stopping the others", part.name)
                    raise
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack

    async def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def _sweeping(self) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(self._sweep_loop(), name="task-sweeper")
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.tasks.sweep()
            except Exception:
                log.exception("the task sweep failed")
