"""A sandbox of the `incus` provider, as a node holds it while the task lives.

The container is the sandbox; this is one node's view of it (its name, the task it is
bound to, the app's exec operation), rebuilt from the container's config by any node that
takes it over (`incus_binding.py`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Limits, Provision

from .provider import Binding, SandboxHandle, SandboxState

PROVIDER_NAME = "incus"


class IncusSandbox(SandboxHandle):
    def __init__(
        self,
        *,
        sandbox_id: str,
        name: str,
        origin: str,
        binding: Binding,
        spec: Provision,
        limits: Limits,
        folder: Path,
        socket_path: Path,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.provider = PROVIDER_NAME
        self.name = name
        self.origin = origin
        self.binding = binding
        self.spec = spec
        self.limits = limits
        self.folder = folder
        self.socket_path = socket_path
        self.manifest: dict[str, Any] = {}
        self.state = SandboxState.STARTING
        self.restarts = 0
        self.exec_id: str | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.bound_at = 0.0  # when its container was bound to the task (epoch seconds)

    @property
    def checkout(self) -> Path:
        return self.folder / "app"

    async def open_connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(str(self.socket_path))

    def torn_down(self) -> bool:
        return self.state is SandboxState.TORN_DOWN
