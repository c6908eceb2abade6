"""Sandboxes per task: provisioned when the task is created, bound to it, torn down at its end.

`Sandboxes` is the task service's provisioner (`TaskService.provisioner`): a create whose
`sandbox.provision` asks for an app gets it from the named provider before the task is
stored, and the task's `app_origin` is the sandbox's. Once the task is stored the manifest
is recorded as its evidence (`sandbox-manifest/v1`); a create that fails after
provisioning tears the sandbox down. The task's end (or expiry) always tears it down too,
keeping the data folder as an artifact when the spec asked for it.

For the task browser it is the `AppLink` (gateway/browser/app_link.py): how to reach the
app's origin, and whether the app can serve a call now. For `GET /v1/tasks/{id}` it adds
the sandbox's state and manifest; after the sandbox is gone the manifest is read back from
the task's evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.core.errors import QuotaExceeded, ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.store.artifacts import ArtifactRef
from gateway.core.tasks.service import TaskCreate

from . import manifest
from .errors import sandbox_unavailable
from .provider import Binding, ProviderRegistry, SandboxHandle, SandboxProvider, SandboxState

log = logging.getLogger(__name__)

ENDED_KEPT = 1024  # ended tasks whose sandbox summary is kept in memory
DATA_ARTIFACT = "sandbox-data.tar.gz"


@dataclass(frozen=True)
class SandboxSink:
    """What the sandboxes write and read of the gateway's records."""

    record: Callable[[TaskIdentity, str, Mapping[str, Any]], Awaitable[Any]]
    put_artifact: Callable[[TaskIdentity, bytes, str, str], Awaitable[ArtifactRef]]
    # The task's identity, and its evidence records of one kind (for a gone sandbox).
    identity: Callable[[str], Awaitable[TaskIdentity | None]]
    evidence_of_kind: Callable[[TaskIdentity, str], Awaitable[list[dict[str, Any]]]]
    # Whether the task still lives (not ended, not expired): a sandbox found without a
    # process holding it is kept for its task only then.
    alive: Callable[[str], Awaitable[bool]] | None = None


@dataclass
class _Live:
    provider: SandboxProvider
    handle: SandboxHandle
    identity: TaskIdentity | None = None  # set once the task is stored
    pending: set[asyncio.Future[Any]] = field(default_factory=set)


class _Provisioned:
    """A sandbox provisioned for a task that is about to be stored."""

    def __init__(self, owner: Sandboxes, live: _Live) -> None:
        self._owner = owner
        self._live = live
        self.origin = live.handle.origin

    async def bind(self, identity: TaskIdentity) -> None:
        await self._owner._bind(self._live, identity)

    async def discard(self) -> None:
        await self._owner._discard(self._live)


class Sandboxes:
    """`max_live_per_org`: the sandboxes one organization may hold at once on this gateway
    (live, or being provisioned), so that one cannot take every slot; None: no share."""

    def __init__(
        self,
        providers: ProviderRegistry,
        sink: SandboxSink,
        *,
        max_live_per_org: int | None = None,
    ) -> None:
        self.providers = providers
        self.sink = sink
        self.max_live_per_org = max_live_per_org
        self._live: dict[str, _Live] = {}  # by task id
        self._provisioning: Counter[str] = Counter()  # by organization
        self._ended: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._tearing: dict[str, asyncio.Future[None]] = {}
        self._watched: set[int] = set()

    # -- the lifetime ---------------------------------------------------------------------

    async def start(self) -> None:
        for provider in self.providers.all():
            self._watch(provider)
            await provider.start()
            await self._sweep(provider)

    async def _sweep(self, provider: SandboxProvider) -> None:
        """Tear down what a provider holds for tasks that no longer live (left by a
        gateway that was killed, or by a node that died); a live task's is kept for
        whichever process takes the task (`attach`)."""
        try:
            found = await provider.found()
        except Exception as exc:  # start-up never fails on what was left behind
            log.error("sandboxes of %s left earlier could not be listed: %s", provider.name, exc)
            return
        for handle in found:
            task_id = handle.binding.task_id
            try:
                if self.sink.alive is not None and await self.sink.alive(task_id):
                    continue
                identity = await self.sink.identity(task_id)
                log.warning(
                    "sandbox %s of %s outlived its task: torn down", handle.sandbox_id, task_id
                )
                await self._teardown(task_id, _Live(provider, handle, identity), "left behind")
            except Exception as exc:
                log.error("sandbox %s left behind was not torn down: %s", handle.sandbox_id, exc)

    async def released(self, task_id: str) -> None:
        """Another node took the task: its sandbox stays, for that node to take over."""
        live = self._live.get(task_id)
        if live is None or not live.provider.durable:
            return
        del self._live[task_id]
        await live.provider.release(live.handle)

    async def attach(self, identity: TaskIdentity) -> None:
        """Before the task's browser starts here: take over the task's sandbox if another
        process made it (a node of a cluster the task moved from, or this gateway before
        a restart), so that the app link and the task's end find it."""
        await self._adopted(identity.task_id, identity)

    async def _adopted(self, task_id: str, identity: TaskIdentity | None) -> _Live | None:
        live = self._live.get(task_id)
        if live is not None or not any(p.durable for p in self.providers.all()):
            return live
        if identity is None:
            identity = await self.sink.identity(task_id)
        if identity is None or identity.sandbox.provision is None:
            return None
        try:
            provider = self.providers.get(identity.sandbox.provision.provider)
            handle = await provider.adopt(task_id)
        except Exception as exc:
            log.warning("the sandbox of %s could not be taken over: %s", task_id, exc)
            return None
        if handle is None:
            return None
        self._watch(provider)
        live = self._live.setdefault(task_id, _Live(provider, handle, identity))
        return live

    async def close(self) -> None:
        for task_id in list(self._live):
            await self.task_ended(task_id, "the gateway is stopping")
        for provider in self.providers.all():
            await provider.close()

    def _watch(self, provider: SandboxProvider) -> None:
        if id(provider) not in self._watched:
            self._watched.add(id(provider))
            provider.on_change(self._changed)

    # -- provisioning (TaskService.provisioner) -----------------------------------------

    async def provision(
        self, task_id: str, request: TaskCreate, expires_at: datetime
    ) -> _Provisioned:
        spec = request.sandbox.provision
        assert spec is not None
        provider = self.providers.get(spec.provider)
        self._watch(provider)
        binding = Binding(task_id, request.org_id, request.actor.id, expires_at)
        # Counted and taken with no await between: of concurrent creates at the share,
        # exactly the free ones go on.
        self._check_share(request.org_id)
        self._provisioning[request.org_id] += 1
        try:
            handle = await provider.provision(spec, binding)
        finally:
            self._provisioning[request.org_id] -= 1
            if not self._provisioning[request.org_id]:
                del self._provisioning[request.org_id]
        live = _Live(provider, handle)
        self._live[task_id] = live
        return _Provisioned(self, live)

    def _check_share(self, org_id: str) -> None:
        limit = self.max_live_per_org
        if limit is None:
            return
        # A task past its expiry no longer counts: its teardown is under way.
        now = datetime.now(UTC)
        current = self._provisioning[org_id] + sum(
            1
            for live in self._live.values()
            if live.handle.binding.org_id == org_id and live.handle.binding.expires_at > now
        )
        if current >= limit:
            raise QuotaExceeded(
                f"organization {org_id!r} already holds {current} sandboxes on this gateway, "
                f"its share of {limit}; end one of its tasks before creating another",
                details={
                    "quota": "live_sandboxes",
                    "org_id": org_id,
                    "limit": limit,
                    "current": current,
                    "adding": 1,
                },
            )

    async def _bind(self, live: _Live, identity: TaskIdentity) -> None:
        live.identity = identity
        await self.sink.record(identity, manifest.KIND, live.handle.manifest)

    async def _discard(self, live: _Live) -> None:
        # Counted in its organization's share until its slot is free again.
        try:
            await live.provider.teardown(live.handle, keep_data=False)
        finally:
            self._live.pop(live.handle.binding.task_id, None)

    # -- state changes the provider saw ----------------------------------------------------

    def _changed(self, handle: SandboxHandle, state: SandboxState, data: dict[str, Any]) -> None:
        live = self._live.get(handle.binding.task_id)
        if live is None or live.handle is not handle or live.identity is None:
            return
        log.warning("sandbox %s of %s: %s", handle.sandbox_id, handle.binding.task_id, state)
        future = asyncio.ensure_future(
            self.sink.record(
                live.identity,
                f"sandbox.{state.value}",
                {"sandbox_id": handle.sandbox_id, "restarts": handle.restarts, **data},
            )
        )
        live.pending.add(future)
        future.add_done_callback(live.pending.discard)

    # -- the task's end -------------------------------------------------------------------

    async def task_ended(self, task_id: str, reason: str) -> None:
        """Tear the task's sandbox down (idempotent; concurrent calls share one teardown)."""
        running = self._tearing.get(task_id)
        if running is None:
            # Held here, or by a backend any process may take it from.
            live = self._live.get(task_id) or await self._adopted(task_id, None)
            if live is None:
                return
            # Another call may have started it while this one took the sandbox over.
            running = self._tearing.get(task_id)
            if running is None:
                running = asyncio.ensure_future(self._teardown(task_id, live, reason))
                self._tearing[task_id] = running
                running.add_done_callback(lambda _f: self._tearing.pop(task_id, None))
        await asyncio.shield(running)

    async def _teardown(self, task_id: str, live: _Live, reason: str) -> None:
        handle = live.handle
        try:
            ended = await live.provider.teardown(handle, keep_data=handle.spec.keep_data)
        finally:
            self._live.pop(task_id, None)
        if live.pending:
            await asyncio.gather(*live.pending, return_exceptions=True)
        data: dict[str, Any] = {
            "sandbox_id": handle.sandbox_id,
            "reason": reason,
            "processes_left": ended.processes_left,
            "restarts": handle.restarts,
        }
        identity = live.identity
        if identity is not None and ended.data is not None:
            try:
                ref = await self.sink.put_artifact(
                    identity, ended.data, DATA_ARTIFACT, "application/gzip"
                )
                data["data"] = ref.public()
            except Exception as exc:  # the teardown itself is done; say what was not kept
                data["data_note"] = f"the data folder could not be kept: {exc}"
        if ended.data_note:
            data["data_note"] = ended.data_note
        self._ended[task_id] = {
            "state": SandboxState.TORN_DOWN.value,
            "sandbox_id": handle.sandbox_id,
            "restarts": handle.restarts,
            "manifest": handle.manifest,
            "teardown": data,
        }
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)
        if identity is not None:
            with contextlib.suppress(Exception):
                await self.sink.record(identity, "sandbox.torn_down", data)

    # -- the task browser's link (gateway/browser/app_link.py) --------------------------

    def opener(
        self, identity: TaskIdentity
    ) -> Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] | None:
        live = self._live.get(identity.task_id)
        if live is None or live.handle.origin != identity.sandbox.app_origin:
            return None
        handle = live.handle

        async def open_connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            # While it restarts, a connection waits in the socket's queue for the new app;
            # an app that is down for good is refused at once rather than waited for.
            if handle.state in (SandboxState.DOWN, SandboxState.TORN_DOWN):
                raise ConnectionRefusedError("the task's app is down")
            return await handle.open_connection()

        return open_connection

    def unavailable(self, identity: TaskIdentity) -> ToolFailure | None:
        if identity.sandbox.provision is None:
            return None
        live = self._live.get(identity.task_id)
        if live is None:
            return sandbox_unavailable(
                "the task's sandbox is gone (it was torn down, or the gateway restarted "
                "since it was provisioned); create a new task",
                retryable=False,
                state="gone",
            )
        state = live.handle.state
        if state is SandboxState.HEALTHY:
            return None
        restarting = state is SandboxState.RESTARTING
        return sandbox_unavailable(
            f"the task's app is {state.value}"
            + ("; it is being started again, retry shortly" if restarting else ""),
            retryable=restarting,
            state=state.value,
            restarts=live.handle.restarts,
        )

    # -- GET /v1/tasks/{id} ---------------------------------------------------------------

    def handle_of(self, task_id: str) -> SandboxHandle | None:
        live = self._live.get(task_id)
        return live.handle if live is not None else None

    async def probe(self, task_id: str) -> dict[str, Any] | None:
        live = self._live.get(task_id)
        if live is not None:
            return {
                "state": live.handle.state.value,
                "sandbox_id": live.handle.sandbox_id,
                "restarts": live.handle.restarts,
                "manifest": live.handle.manifest,
            }
        ended = self._ended.get(task_id)
        if ended is not None:
            return dict(ended)
        identity = await self.sink.identity(task_id)
        if identity is None or identity.sandbox.provision is None:
            return None
        found = await self.sink.evidence_of_kind(identity, manifest.KIND)
        recorded = found[0].get("data") if found else None
        return {"state": "gone", "manifest": recorded}
