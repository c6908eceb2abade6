"""The blank containers of the `incus` provider, and its warm stock of them.

A blank is a container as every sandbox starts, holding what no task decides: the
gateway's image, `/data` and `/tmp` as tmpfs of the budget's sizes, the system-call policy,
no user namespaces, the host's `/usr` and the gateway's interpreter read-only, and the
proxy device that makes the app's socket a unix socket on this machine. Making one takes
Incus a few seconds, so `warm` of them are kept started (the stock); a task takes one and
binds it to itself (`incus_binding.py`). What every blank is made from (the storage
pool, the profile, the image) is made here too, when it is missing. Every blank is
marked with the claimant that made it and when, so a killed gateway's stock is swept by
the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Budgets, IncusBackend

from . import incus_image, seccomp
from .errors import SandboxError
from .incus_api import Incus, IncusError

log = logging.getLogger(__name__)

# The prefix of everything the gateway writes into a container's config.
KEY = "user.gateway."
APP_SOCKET = f"{incus_image.RUN_DIR}/app.sock"
# A blank of the warm stock is used within this long or replaced (a stock that outlives
# its gateway, killed, is swept by the next start after twice this).
STOCK_MAX_AGE_S = 600.0
# Refused with ENOSYS (never a kill: runtimes probe some of them and fall back), on top of
# what Incus refuses by default: the kernel surfaces no provider's app gets (seccomp.py).
# Memory a jail could not count is counted here by the container's cgroup instead.
REFUSED_SYSCALLS = seccomp.KERNEL_SURFACES
_INCUS_DEFAULT_DENY = (
    "kexec_load",
    "open_by_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
)


def seccomp_policy() -> str:
    """The container's seccomp policy, in LXC's denylist form."""
    lines = ["2", "denylist", "reject_force_umount", "[all]"]
    lines += [f"{name} errno 38" for name in _INCUS_DEFAULT_DENY]
    lines += [f"{name} errno 38" for name in REFUSED_SYSCALLS]
    return "\n".join(lines) + "\n"


def config_time(text: str) -> float:
    """A time written into a container's config; 0 (long ago) when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def read_only(path: str) -> dict[str, str]:
    """A host path visible read-only at the same place in the container."""
    return {"type": "disk", "source": path, "path": path, "readonly": "true"}


def runtime_paths(paths: Iterable[str]) -> list[str]:
    """The folders of an interpreter to mount, less what `/usr` (mounted whole) holds."""
    kept: list[str] = []
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):
        if path == "/usr" or path.startswith("/usr/"):
            continue
        kept.append(path)
    return kept


class Blanks:
    """Making, stocking and deleting the blanks of one deployment. `reach` gives the
    provider's Incus client, or None once the provider is closed (the stock stops)."""

    def __init__(
        self,
        reach: Callable[[], Incus | None],
        backend: IncusBackend,
        *,
        socket_dir: Path,
        budgets: Budgets,
        claimant: str,
    ) -> None:
        self._reach = reach
        self.backend = backend
        self.socket_dir = socket_dir
        self.budgets = budgets
        self.claimant = claimant
        # Started blank containers no task has had, with when each was made (`warm`).
        self._stock: list[tuple[str, float]] = []
        self._filling: asyncio.Future[None] | None = None

    @property
    def incus(self) -> Incus:
        incus = self._reach()
        if incus is None:
            raise SandboxError("the incus provider is not started")
        return incus

    def socket_of(self, name: str) -> Path:
        return self.socket_dir / f"{name.removeprefix(self.backend.prefix)}.sock"

    def new_name(self) -> str:
        return f"{self.backend.prefix}sbx-{secrets.token_hex(8)}"

    async def prepare(self) -> None:
        """Make what every blank is made from, when missing: the pool, the profile, the
        image."""
        b = self.backend
        if not await self.incus.has(f"/storage-pools/{b.pool}"):
            with contextlib.suppress(IncusError):  # made by another node meanwhile
                await self.incus.request(
                    "POST", "/storage-pools", body={"name": b.pool, "driver": "dir"}
                )
        if not await self.incus.has(f"/profiles/{b.profile}"):
            with contextlib.suppress(IncusError):
                await self.incus.request(
                    "POST",
                    "/profiles",
                    body={
                        "name": b.profile,
                        "description": "gateway sandboxes: a root disk, no network card",
                        "devices": {"root": {"type": "disk", "path": "/", "pool": b.pool}},
                    },
                )
        if not await self.incus.has(f"/images/aliases/{b.image}"):
            await self.incus.import_image(incus_image.build(), alias=b.image)

    async def sweep(self) -> None:
        """Delete blanks of this deployment that nobody took in twice their lifetime: a
        killed gateway's stock (a live node's is younger, or already replaced)."""
        for instance in await self.incus.instances(prefix=self.backend.prefix):
            config = instance.get("config") or {}
            if config.get(f"{KEY}deployment") != self.backend.deployment:
                continue
            _claimant, _, made = str(config.get(f"{KEY}blank", "")).partition("@")
            if made and time.time() - config_time(made) > 2 * STOCK_MAX_AGE_S:
                await self.delete(instance["name"])

    async def stocked(self) -> str | None:
        """A started blank of the warm stock, if one is ready (stale ones are deleted);
        the stock is refilled behind the taker's back."""
        name = None
        while self._stock:
            candidate, made = self._stock.pop(0)
            if time.time() - made < STOCK_MAX_AGE_S:
                name = candidate
                break
            await self.delete(candidate)
        self.refill()
        return name

    def refill(self) -> None:
        if self._filling is None or self._filling.done():
            self._filling = asyncio.ensure_future(self._fill())

    async def _fill(self) -> None:
        while self._reach() is not None and len(self._stock) < self.backend.warm:
            name = self.new_name()
            try:
                await self.create(name)
            except IncusError as exc:
                log.warning("the warm stock of Incus containers is not refilled: %s", exc)
                return
            self._stock.append((name, time.time()))

    async def close(self) -> None:
        """Stop refilling, and delete the stock no task took."""
        if self._filling is not None:
            self._filling.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._filling
        stock, self._stock = self._stock, []
        for name, _made in stock:
            await self.delete(name)

    async def delete(self, name: str) -> None:
        with contextlib.suppress(IncusError):
            await self.incus.delete_forced(name)
        with contextlib.suppress(OSError):
            self.socket_of(name).unlink()

    async def create(self, name: str) -> None:
        try:
            await self.incus.create(self.blank(name))
            await self.incus.change_state(name, "start")
            # The gateway's interpreter (the launcher runs on it, whatever the app's
            # command), plugged in once started: mounted at its start, a path of it under
            # /tmp would be hidden by the container's own /tmp.
            found, etag = await self.incus.instance(name)
            devices = dict(found.get("devices") or {})
            for index, path in enumerate(runtime_paths((sys.prefix, sys.base_prefix))):
                devices[f"python{index}"] = read_only(path)
            await self.incus.replace_instance(name, {**found, "devices": devices}, etag=etag)
        except BaseException:
            await self.delete(name)
            raise

    def blank(self, name: str) -> dict[str, Any]:
        """A container as every sandbox starts: what no task decides (the image, the
        mounts and their sizes, the system-call policy, no user namespaces, the host's
        programs and the gateway's interpreter read-only)."""
        uid = incus_image.APP_UID
        mounts = [
            "lxc.init.cmd = /init",
            f"lxc.mount.entry = tmpfs data tmpfs rw,nosuid,nodev,size={self.budgets.data_bytes},"
            f"nr_inodes={self.budgets.data_entries},uid={uid},gid={uid},mode=0700 0 0",
            f"lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,size={self.budgets.tmp_bytes},"
            "mode=1777 0 0",
        ]
        devices: dict[str, dict[str, str]] = {
            "usr": read_only("/usr"),
            # The app's socket inside, as a socket on this machine: part of the blank, as
            # a proxy device takes Incus about a second to start.
            "http": {
                "type": "proxy",
                "listen": f"unix:{self.socket_of(name)}",
                "connect": f"unix:{APP_SOCKET}",
                "bind": "host",
                "mode": "0600",
            },
        }
        return {
            "name": name,
            "type": "container",
            "source": {"type": "image", "alias": self.backend.image},
            "profiles": [self.backend.profile],
            "config": {
                "raw.lxc": "\n".join(mounts),
                "raw.seccomp": seccomp_policy(),
                "linux.sysctl.user.max_user_namespaces": "0",
                "security.privileged": "false",
                "security.nesting": "false",
                # Until a task's own limits replace it: a blank runs nothing but its init
                # (its start runs a few hooks in its cgroup).
                "limits.processes": "16",
                "limits.memory": "64MiB",
                f"{KEY}deployment": self.backend.deployment,
                f"{KEY}blank": f"{self.claimant}@{time.time():.0f}",
            },
            "devices": devices,
        }
