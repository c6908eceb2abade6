"""A sandbox of the `local` provider, as the provider holds it while the task lives.

Everything of it is below one folder, which the provider made and removes; the jail's PID
namespace is held open by a descriptor, so its number never names another's processes.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Limits, Provision, Repository

from . import mounts
from .proc_scan import PROC
from .provider import Binding, SandboxHandle, SandboxState

PROVIDER_NAME = "local"
# The end of the app's log quoted when it fails: its last characters, of at most its last
# bytes (a character may take several).
LOG_TAIL_BYTES = 2000
LOG_TAIL_CHARS = 500


class LocalSandbox(SandboxHandle):
    """One live sandbox of the local provider: its folder (checkout, data, tmp, socket and
    log), its user and slot, its jail's process and PID namespace, what was mounted for
    it and what the kernel holds it to."""

    def __init__(
        self,
        *,
        sandbox_id: str,
        origin: str,
        binding: Binding,
        spec: Provision,
        repository: Repository,
        limits: Limits,
        folder: Path,
        uid: int,
        slot: int,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.provider = PROVIDER_NAME
        self.origin = origin
        self.binding = binding
        self.spec = spec
        self.repository = repository
        self.limits = limits
        self.folder = folder
        self.uid = uid
        self.slot = slot
        self.manifest: dict[str, Any] = {}
        self.state = SandboxState.STARTING
        self.restarts = 0
        self.command: list[str] = []
        self.env: dict[str, str] = {}
        self.listener: socket.socket | None = None
        self.process: asyncio.subprocess.Process | None = None
        # The jail's PID namespace, by its number, and a descriptor of it held open while
        # the number is used: the kernel gives a freed namespace's number to the next
        # one made, and a number alone would then name someone else's processes.
        self.pid_namespace: int | None = None
        self.pid_namespace_fd: int | None = None
        self.cgroup: Path | None = None
        self.watcher: asyncio.Task[None] | None = None
        # The filesystems mounted for it (data, tmp), unmounted at teardown.
        self.mounted: list[Path] = []
        # What the kernel says it holds the sandbox to, read back (`enforcement.py`).
        self.sized: dict[str, mounts.Sized] = {}

    @property
    def checkout(self) -> Path:
        return self.folder / "app"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def tmp(self) -> Path:
        """The folder the app sees as its /tmp."""
        return self.folder / "tmp"

    @property
    def socket_path(self) -> Path:
        return self.folder / "app.sock"

    @property
    def log_path(self) -> Path:
        return self.folder / "app.log"

    async def open_connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(str(self.socket_path))

    def torn_down(self) -> bool:
        return self.state is SandboxState.TORN_DOWN

    def hold_namespace(self, pid: int) -> None:
        """Know the jail's PID namespace as that of `pid`, kept from being freed (and its
        number given to another) until `release_namespace`."""
        self.release_namespace()
        fd = os.open(PROC / str(pid) / "ns" / "pid", os.O_RDONLY | os.O_CLOEXEC)
        self.pid_namespace_fd = fd
        self.pid_namespace = os.fstat(fd).st_ino

    def release_namespace(self) -> None:
        if self.pid_namespace_fd is not None:
            os.close(self.pid_namespace_fd)
        self.pid_namespace = self.pid_namespace_fd = None

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                return fh.read().decode("utf-8", "replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""
