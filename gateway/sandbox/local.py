"""The `local` provider: each task's app in a bubblewrap jail on the gateway's own machine.

For one task it:

1. checks the spec against the registration (repository, environment names, limits);
2. lays out its folder (`local_folder.py`): writes the commit into
   `<sandbox dir>/<id>/app` (`checkout.py`), mounts a tmpfs of the data budget's size at
   `data` and another of the /tmp budget's at `tmp`, each owned by the sandbox's user
   (`mounts.py`), and binds the app's listening unix socket (`app.sock`, in a folder the
   sandbox never sees, so nothing the app does can point the gateway's connections
   elsewhere);
3. starts the app's command in its jail (`local_jail.py`, `bubblewrap.py`), as a user of
   its own: uid `GATEWAY_SANDBOX_UID_BASE + slot`, one slot per live sandbox, so the
   process limit, file ownership and signals of one sandbox never touch another's;
4. waits for `health_path` to answer 2xx through the socket, within the registration's
   `ready_timeout_s`; anything short of that tears it all down and raises.

While the task lives, a watcher waits on the jail: when the app exits, it is started once
more (same checkout, same data, same socket, so the origin does not change); when it exits
again it stays down. Teardown kills the jail's PID namespace (every process in it goes with
its init), then any process of the sandbox's user, counts what is left from /proc, keeps
the data folder as a gzipped tar when asked (and nothing of it is left running), unmounts
its filesystems and removes the folder (`tree.py`: at any depth, without recursion; what
cannot be removed is logged, and the slot is freed all the same). At start, and before a
slot's uid is used again, any process of the sandboxes' uids is killed; at start what an
earlier gateway left below the sandbox dir is unmounted and removed, and nothing of it can
stop the start.

It runs as root only: giving each sandbox a user of its own, and the namespaces without
a user namespace, need it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import tarfile
import time
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Limits, Provision, Repository
from gateway.parts import LocalConfig

from . import local_folder, local_jail, manifest, probe, seccomp
from .bubblewrap import APP_DIR, find_tools, jail_marker
from .cgroup import CgroupParent
from .checkout import Checkout
from .commit_tree import resolve_commit
from .data_archive import archive
from .enforcement import read_back
from .errors import SandboxError
from .local_sandbox import PROVIDER_NAME, LocalSandbox
from .proc_scan import KILL_WAIT_S, reap_uids, sandbox_processes
from .provider import Binding, Health, SandboxHandle, SandboxProvider, SandboxState, Teardown
from .registration import check

log = logging.getLogger(__name__)


class LocalProvider(SandboxProvider):
    name = PROVIDER_NAME

    def __init__(self, config: LocalConfig) -> None:
        super().__init__()
        self.config = config
        self.root = config.sandboxes.root
        self.cgroup = CgroupParent.delegated(config.cgroup)
        # The system-call filter every jail gets; None on an architecture it is not
        # written for (the manifest then does not name it).
        self.seccomp: bytes | None = seccomp.no_user_namespaces()
        self._free_slots = list(range(config.sandboxes.max_live))
        self._live: dict[str, LocalSandbox] = {}

    # -- the gateway's lifetime -----------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self._clear_root)

    def _clear_root(self) -> None:
        # What a gateway that stopped without tearing down left: its jails died with it
        # (`--die-with-parent`), unless one was orphaned on its way (a jail's app runs as
        # a sandbox uid, whoever its parent is now): any process of these uids is killed,
        # and a uid one outlives is not handed out. Their filesystems and folders go next.
        uid_base = self.config.uid_base
        left = reap_uids(range(uid_base, uid_base + self.config.sandboxes.max_live))
        for uid in left:
            log.error("a process of sandbox uid %d outlived SIGKILL; its slot stays unused", uid)
            with contextlib.suppress(ValueError):
                self._free_slots.remove(uid - uid_base)
        local_folder.clear_root(self.root)

    async def close(self) -> None:
        for handle in list(self._live.values()):
            await self.teardown(handle, keep_data=False)

    def live(self) -> list[LocalSandbox]:
        return list(self._live.values())

    # -- provisioning -----------------------------------------------------------------------

    def _check(self, spec: Provision) -> tuple[Repository, Limits]:
        return check(spec, self.config.sandboxes.repositories, self.config.sandboxes.max_limits)

    def _require_host(self) -> None:
        reason = host_unready()
        if reason is not None:
            raise SandboxError(reason)

    async def provision(self, spec: Provision, binding: Binding) -> LocalSandbox:
        repository, limits = self._check(spec)
        self._require_host()
        if not self._free_slots:
            raise SandboxError("every local sandbox slot is in use; retry when a task ends")
        # Before any work: a commit that is not there costs nothing more.
        await asyncio.to_thread(resolve_commit, Path(repository.path), spec.commit)
        slot = await asyncio.to_thread(self._take_slot)
        sandbox_id = f"sbx-{secrets.token_hex(8)}"
        handle = LocalSandbox(
            sandbox_id=sandbox_id,
            origin=f"http://{sandbox_id}.{self.config.sandboxes.domain}",
            binding=binding,
            spec=spec,
            repository=repository,
            limits=limits,
            folder=self.root / sandbox_id,
            uid=self.config.uid_base + slot,
            slot=slot,
        )
        self._live[sandbox_id] = handle
        try:
            checkout = await asyncio.to_thread(self._prepare, handle)
            await self._start(handle)
            await self._until_healthy(handle)
            enforced, not_enforced = await asyncio.to_thread(read_back, handle, limits)
        except BaseException:
            await self._destroy(handle)
            raise
        handle.manifest = manifest.of(
            handle,
            checkout,
            # As registered: `{python}` is the gateway's interpreter (a host path, which
            # evidence would not keep anyway).
            command=list(handle.repository.command),
            enforcement=[
                "rlimit",
                *(["cgroup2"] if handle.cgroup is not None else []),
                *([seccomp.ENFORCER] if enforced["refused_calls"] else []),
                "tmpfs",
            ],
            user=handle.uid,
            enforced=enforced,
            not_enforced=not_enforced,
        )
        handle.state = SandboxState.HEALTHY
        handle.watcher = asyncio.ensure_future(self._watch(handle))
        return handle

    def _take_slot(self) -> int:
        """A free slot whose uid no process holds (one left of an earlier sandbox is
        killed first; a slot one outlives is not used again)."""
        while self._free_slots:
            slot = self._free_slots.pop(0)
            uid = self.config.uid_base + slot
            if not reap_uids([uid]):
                return slot
            log.error("a process of sandbox uid %d outlived SIGKILL", uid)
        raise SandboxError("every local sandbox slot is in use; retry when a task ends")

    def _prepare(self, handle: LocalSandbox) -> Checkout:
        self.root.mkdir(parents=True, exist_ok=True)
        return local_folder.prepare(handle, self.config.sandboxes.budgets, self.cgroup)

    async def _start(self, handle: LocalSandbox) -> None:
        await local_jail.start(
            handle,
            read_only=local_folder.read_only(handle.repository),
            seccomp_program=self.seccomp,
        )

    async def _until_healthy(self, handle: LocalSandbox) -> None:
        async def exited() -> dict[str, Any] | None:
            process = handle.process
            if process is None or process.returncode is None:
                return None
            return {"exit_code": process.returncode, "log": handle.log_tail()}

        await probe.until_healthy(
            handle.socket_path, handle.origin, handle.repository, exited, log=handle.log_tail
        )

    async def health(self, handle: SandboxHandle) -> Health:
        assert isinstance(handle, LocalSandbox)
        return await probe.health(handle, handle.socket_path, handle.repository.health_path)

    # -- the app dying mid-task -----------------------------------------------------------

    async def _watch(self, handle: LocalSandbox) -> None:
        while True:
            assert handle.process is not None
            code = await handle.process.wait()
            if handle.state is SandboxState.TORN_DOWN:
                return
            await self._kill(handle)
            died = {"exit_code": code, "log": handle.log_tail()}
            if not await self.restarted(handle, died, lambda: self._restart(handle)):
                return

    async def _restart(self, handle: LocalSandbox) -> None:
        try:
            await self._start(handle)
            await self._until_healthy(handle)
        except SandboxError:
            await self._kill(handle)  # nothing of a jail that does not serve is left
            raise

    # -- teardown ---------------------------------------------------------------------------

    async def teardown(self, handle: SandboxHandle, *, keep_data: bool) -> Teardown:
        assert isinstance(handle, LocalSandbox)
        handle.state = SandboxState.TORN_DOWN
        await self._stop_tasks(handle)
        left = await self._kill(handle)
        data, note = None, None
        if keep_data and left:
            # A process still there could swap what is archived (as root) for a link to a
            # host file between a look and a read: nothing of the folder is read.
            note = (
                f"{left} processes of the sandbox outlived its teardown: its data folder was "
                "not kept"
            )
        elif keep_data and handle.data.exists():
            try:
                data, note = await asyncio.to_thread(
                    archive, handle.data, self.config.sandboxes.keep_data_max_bytes
                )
            except (OSError, tarfile.TarError) as exc:  # the teardown goes on regardless
                note = f"the data folder could not be archived: {exc}"
        await self._destroy(handle, left=left)
        return Teardown(processes_left=left, data=data, data_note=note)

    async def _stop_tasks(self, handle: LocalSandbox) -> None:
        current = asyncio.current_task()
        task = handle.watcher
        if task is not None and task is not current:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        handle.watcher = None

    async def _kill(self, handle: LocalSandbox) -> int:
        """Kill every process of the sandbox; returns how many are still there after."""
        process = handle.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()  # bwrap: its init, and with it the PID namespace, follow
        # A jail killed while it set up can leave its namespace's first process behind: it
        # runs as root, in a namespace not reported yet, waiting for its dead parent.
        marker = jail_marker(local_folder.ID_VARIABLE, handle.sandbox_id)
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            found = sandbox_processes(handle.uid, handle.pid_namespace, marker)
            for pid in found:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if process is not None and process.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 0.1)
            elif not found:
                # Nothing is left in it: from now on the sandbox is its uid alone, and the
                # namespace's number is the kernel's to give again.
                handle.release_namespace()
                return 0
            if time.monotonic() >= deadline:
                return len(sandbox_processes(handle.uid, handle.pid_namespace, marker))
            if found:
                await asyncio.sleep(0.02)

    async def _destroy(self, handle: LocalSandbox, *, left: int | None = None) -> None:
        """Remove what provisioning made; the slot is free again only when no process of
        its user is left."""
        if left is None:
            await self._stop_tasks(handle)
            left = await self._kill(handle)
        if handle.listener is not None:
            handle.listener.close()
            handle.listener = None
        if handle.cgroup is not None:
            CgroupParent.remove(handle.cgroup)
        handle.release_namespace()
        try:
            await asyncio.to_thread(local_folder.remove, handle)
        except Exception:  # the slot is freed regardless: its folder's name is never reused
            log.exception("sandbox %s: its folder could not be removed", handle.sandbox_id)
        self._live.pop(handle.sandbox_id, None)
        if left == 0:
            self._free_slots.append(handle.slot)
        else:
            log.error(
                "sandbox %s: %d processes of uid %d outlived teardown; its slot stays unused",
                handle.sandbox_id,
                left,
                handle.uid,
            )


def host_unready() -> str | None:
    """Why the local provider cannot run sandboxes on this machine; None when it can."""
    missing = [name for name, path in find_tools().items() if path is None]
    if missing:
        return (
            f"the local sandbox provider needs {', '.join(missing)} on this machine "
            "(make setup installs bubblewrap)"
        )
    if os.geteuid() != 0:
        return (
            "the local sandbox provider runs each sandbox as a user of its own and needs "
            "the gateway to run as root"
        )
    return None


__all__ = [
    "APP_DIR",
    "LocalProvider",
    "LocalSandbox",
    "host_unready",
    "reap_uids",
    "sandbox_processes",
]
