"""The provider interface: what a sandbox backend does, and the registry that names them.

A provider turns a task's `Provision` into a running app bound to that task:

    handle = await provider.provision(spec, binding)   # healthy, or raises, leaving nothing
    health = await provider.health(handle)             # asks the app now
    ended = await provider.teardown(handle, keep_data=...)  # always ends every process

`provision` must leave nothing running when it raises (a `SandboxError`: refused, unknown
commit, unhealthy, unavailable). The handle says where the app is for the task's browser
(`origin`, and `open_connection` to reach it: the guard proxy uses it instead of a TCP
connection to that origin), its `state`, and its `manifest` (`manifest.py`). A provider
tells the gateway when the app dies or comes back (`on_change`), and restarts it once.

A provider whose sandboxes outlive the gateway's processes (`incus`) also lists them
(`found`) and hands one over to whichever process now holds its task (`adopt`).

Adding a backend (a container or VM host) is a class with these methods,
registered under its name on the gateway's `ProviderRegistry`
(`gw.services.get(Sandboxes).providers.add(MyProvider(...))`, docs/sandbox.md); a task then
asks for it with `"provider": "<name>"`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gateway.core.sandbox_spec import Provision

from .errors import SandboxError, SandboxRefused


class SandboxState(StrEnum):
    STARTING = "starting"
    HEALTHY = "healthy"
    RESTARTING = "restarting"  # the app died; the provider is starting it again
    DOWN = "down"  # the app died again after its one restart, or could not restart
    TORN_DOWN = "torn_down"


@dataclass(frozen=True)
class Binding:
    """Who a sandbox is for: fixed at provisioning and written into its manifest."""

    task_id: str
    org_id: str
    actor_id: str
    expires_at: datetime


@dataclass(frozen=True)
class Health:
    state: SandboxState
    healthy: bool
    detail: str | None = None


@dataclass(frozen=True)
class Teardown:
    """What teardown found: processes of the sandbox still there after it (0 expected), and
    the data folder as a gzipped tar when it was asked to be kept."""

    processes_left: int
    data: bytes | None = None
    data_note: str | None = None


ChangeListener = Callable[["SandboxHandle", SandboxState, dict[str, Any]], None]


class SandboxHandle(abc.ABC):
    """One provisioned sandbox, as the gateway holds it."""

    sandbox_id: str
    provider: str
    origin: str
    binding: Binding
    spec: Provision
    manifest: dict[str, Any]
    state: SandboxState
    restarts: int

    @abc.abstractmethod
    async def open_connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A fresh stream to the app's HTTP server; raises OSError when it cannot be had."""


class SandboxProvider(abc.ABC):
    name: str
    # Its sandboxes outlive the process that made them (`found`, `adopt`).
    durable = False

    def __init__(self) -> None:
        self._listeners: list[ChangeListener] = []

    @abc.abstractmethod
    async def provision(self, spec: Provision, binding: Binding) -> SandboxHandle: ...

    @abc.abstractmethod
    async def health(self, handle: SandboxHandle) -> Health: ...

    @abc.abstractmethod
    async def teardown(self, handle: SandboxHandle, *, keep_data: bool) -> Teardown: ...

    async def start(self) -> None:  # noqa: B027 - optional, nothing to do by default
        """Called once when the gateway starts (clear what a previous run left)."""

    async def close(self) -> None:  # noqa: B027 - optional, nothing to do by default
        """Called once when the gateway stops, after every handle was torn down."""

    async def found(self) -> list[SandboxHandle]:
        """Sandboxes of this gateway that outlive its processes (a backend of their own,
        such as Incus): every one the backend holds now. A provider whose sandboxes die
        with the process that made them has none."""
        return []

    async def release(self, handle: SandboxHandle) -> None:  # noqa: B027 - optional
        """This process no longer holds the handle's task (another node took it): stop
        watching the sandbox, leave it running for the one that holds it now."""

    async def adopt(self, task_id: str) -> SandboxHandle | None:
        """The task's sandbox, taken over from the process that made it (another node of a
        cluster, or this gateway before a restart); None when there is none to take."""
        return None

    def on_change(self, listener: ChangeListener) -> None:
        """`listener(handle, state, data)` when a handle's state changes on its own."""
        self._listeners.append(listener)

    def changed(self, handle: SandboxHandle, state: SandboxState, data: dict[str, Any]) -> None:
        handle.state = state
        for listener in list(self._listeners):
            listener(handle, state, data)

    async def restarted(
        self,
        handle: SandboxHandle,
        died: dict[str, Any],
        restart: Callable[[], Awaitable[None]],
    ) -> bool:
        """The handle's app died (`died`: what is known of its end): it is started once
        more by `restart` (which raises `SandboxError` when it does not serve again),
        and a second death leaves it down. Whether it serves again, so that its watcher
        goes on; the changes are reported as they happen."""
        if handle.restarts >= 1:
            self.changed(handle, SandboxState.DOWN, {**died, "restarts": handle.restarts})
            return False
        handle.restarts += 1
        self.changed(handle, SandboxState.RESTARTING, died)
        try:
            await restart()
        except SandboxError as exc:
            self.changed(
                handle, SandboxState.DOWN, {"error": exc.message, "restarts": handle.restarts}
            )
            return False
        if handle.state is SandboxState.TORN_DOWN:
            return False
        self.changed(handle, SandboxState.HEALTHY, {"restarts": handle.restarts})
        return True


class ProviderRegistry:
    """Providers by name. Only what is registered can be asked for."""

    def __init__(self) -> None:
        self._providers: dict[str, SandboxProvider] = {}

    def add(self, provider: SandboxProvider) -> None:
        if provider.name in self._providers:
            raise ValueError(f"a sandbox provider {provider.name!r} is already registered")
        self._providers[provider.name] = provider

    def get(self, name: str) -> SandboxProvider:
        provider = self._providers.get(name)
        if provider is None:
            raise SandboxRefused(
                f"no sandbox provider {name!r} in this gateway (it has: "
                f"{', '.join(sorted(self._providers)) or 'none'})",
                field="provider",
            )
        return provider

    def all(self) -> list[SandboxProvider]:
        return list(self._providers.values())
