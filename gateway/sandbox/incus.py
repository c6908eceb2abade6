"""The `incus` provider: each task's app in an unprivileged Incus container of its own.

For one task it:

1. checks the spec against the registration (`registration.py`), as every provider does;
2. writes the commit into `<sandbox dir>/<id>/app` (`checkout.py`), bound into the
   container read-only at `/app`;
3. takes a blank container of the warm stock, or makes one (`incus_blanks.py`), from the
   gateway's own image (`incus_image.py`, built on first use: no image server), with no
   network card (loopback only), the host's `/usr` and the gateway's interpreter
   read-only, `/data` and `/tmp` as tmpfs of the budget's sizes (the kernel refuses a byte
   more, and their pages count in the container's memory), Incus's `limits.memory` and
   `limits.processes` (the container's cgroup: shared memory, memfds and tmpfs pages
   included), no user namespaces inside (`user.max_user_namespaces` 0) and a seccomp
   policy refusing what an app has no need for; the container is unprivileged (its root is
   an unprivileged host uid) and has an IPC namespace and keyring of its own;
4. starts the app (`incus_app.py`) with `incus_launcher.py` as the container's `app`
   user: rlimits set, a listening unix socket handed over as standard input; a proxy
   device makes that socket a unix socket on this machine (`<socket dir>/<id>.sock`,
   mode 0600), which is how the task's guard reaches the app;
5. waits for `health_path` to answer 2xx, and writes the manifest, with every limit as the
   kernel holds it (read back from Incus and from inside), never as asked.

The container, not a gateway process, is the sandbox: what a node knows of it is written
into the container's own config (`incus_binding.py`, `user.gateway.*`: the task it is
bound to, the spec, the manifest, the app's exec operation), so any node of a cluster
that reaches the same Incus can take it over (`adopt`) when the task moves there, and can
tear it down. Teardown is claimed with a compare-and-set on the container's ETag, so of
several nodes ending one task exactly one archives its data and deletes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
import time
from pathlib import Path

from gateway.core.sandbox_spec import IncusBackend, Provision, Repository
from gateway.parts import IncusConfig

from . import incus_app, incus_image, manifest, probe, tree
from .checkout import Checkout, extract
from .commit_tree import resolve_commit
from .errors import SandboxError
from .incus_api import Endpoint, Incus, IncusError
from .incus_binding import bind, claim, from_config, remember
from .incus_blanks import Blanks
from .incus_sandbox import PROVIDER_NAME, IncusSandbox
from .provider import Binding, Health, SandboxHandle, SandboxProvider, SandboxState, Teardown
from .registration import check

log = logging.getLogger(__name__)

WATCH_WAIT_S = 30.0
GONE_WAIT_S = 30.0
# Longer than any provisioning (a registration's ready timeout is at most 600 s).
PROVISIONING_MAX_S = 900.0
# Where apps' sockets appear by default: short (a unix socket's path has at most 107
# bytes) and the same for every node of a cluster on one machine.
SOCKET_ROOT = "/run/gateway-incus"
MAX_SOCKET_PATH = 107
# What the manifest's `enforced_by` names for each mechanism.
ENFORCERS = ("incus:cgroup", "incus:unprivileged", "incus:no-network", "tmpfs", "rlimit")


class IncusProvider(SandboxProvider):
    name = PROVIDER_NAME
    durable = True

    def __init__(self, config: IncusConfig) -> None:
        super().__init__()
        self.config = config
        backend = config.backend
        self.root = config.sandboxes.root / "incus"
        self.socket_dir = Path(backend.socket_dir or f"{SOCKET_ROOT}/{backend.deployment}")
        self.endpoint = Endpoint(
            socket=backend.socket,
            url=backend.url,
            client_cert=backend.client_cert,
            client_key=backend.client_key,
            server_cert=backend.server_cert,
            project=backend.project,
        )
        self._incus: Incus | None = None
        self._live: dict[str, IncusSandbox] = {}
        # Creates past the slot check that are not in `_live` yet: counted at the check, in
        # the same loop turn, so concurrent creates cannot all pass it.
        self._reserved = 0
        self._prepared = False  # the pool, the profile and the image are there
        # A claim that names this gateway process (a node restarted is another claimant).
        self._claimant = secrets.token_hex(8)
        self.blanks = Blanks(
            lambda: self._incus,
            backend,
            socket_dir=self.socket_dir,
            budgets=config.sandboxes.budgets,
            claimant=self._claimant,
        )

    @property
    def backend(self) -> IncusBackend:
        return self.config.backend

    # -- the gateway's lifetime ------------------------------------------------------------

    @property
    def incus(self) -> Incus:
        if self._incus is None:
            raise SandboxError("the incus provider is not started")
        return self._incus

    async def start(self) -> None:
        """Reach Incus and make what every container needs: the pool, the profile, the
        image. A gateway whose Incus cannot be reached still starts; its creates then
        answer 503 until it can be."""
        self._incus = Incus(self.endpoint)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        longest = self.socket_dir / f"sbx-{'0' * 16}.sock"
        if len(str(longest)) > MAX_SOCKET_PATH:
            raise SandboxError(
                f"the Incus socket folder {self.socket_dir} is too long for a unix socket "
                f"path (at most {MAX_SOCKET_PATH} bytes with the socket's name): set a "
                "shorter `socket_dir` in GATEWAY_SANDBOX_INCUS"
            )
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            await self.blanks.prepare()
            await self.blanks.sweep()
        except IncusError as exc:
            log.error("sandboxes on Incus are unavailable for now: %s", exc)
            return
        self._prepared = True
        self.blanks.refill()

    async def close(self) -> None:
        for handle in list(self._live.values()):
            await self.release(handle)
        await self.blanks.close()
        if self._incus is not None:
            await self._incus.close()
            self._incus = None

    # -- provisioning -------------------------------------------------------------------------

    async def provision(self, spec: Provision, binding: Binding) -> IncusSandbox:
        repository, limits = check(
            spec, self.config.sandboxes.repositories, self.config.sandboxes.max_limits
        )
        if not self._prepared:
            # Incus could not be reached at start: its pool, profile and image are made now.
            try:
                await self.blanks.prepare()
            except IncusError as exc:
                raise SandboxError(f"Incus cannot be reached: {exc.message}") from exc
            self._prepared = True
        if len(self._live) + self._reserved >= self.config.sandboxes.max_live:
            raise SandboxError("every Incus sandbox slot of this gateway is in use; retry later")
        self._reserved += 1
        try:
            # Before any work: a commit that is not there costs nothing more.
            await asyncio.to_thread(resolve_commit, Path(repository.path), spec.commit)
            # A blank of the warm stock, or one made now under a new name: either way the
            # sandbox is named after its container (its socket is the blank's own).
            stocked = await self.blanks.stocked()
        finally:
            self._reserved -= 1
        name = stocked or self.blanks.new_name()
        sandbox_id = name.removeprefix(self.backend.prefix)
        handle = IncusSandbox(
            sandbox_id=sandbox_id,
            name="",  # set once the container is there
            origin=f"http://{sandbox_id}.{self.config.sandboxes.domain}",
            binding=binding,
            spec=spec,
            limits=limits,
            folder=self.root / sandbox_id,
            socket_path=self.blanks.socket_of(name),
        )
        self._live[sandbox_id] = handle
        try:
            # The checkout is written while the container is made (when none was ready).
            writing = asyncio.ensure_future(
                asyncio.to_thread(self._write_checkout, handle, repository)
            )
            try:
                if stocked is None:
                    await self.blanks.create(name)
                handle.name = name
            finally:
                checkout = await writing
            await bind(self.incus, handle, repository, checkout.commit, self.backend.deployment)
            await incus_app.launch(self.incus, handle, repository, checkout.commit)
            await incus_app.until_healthy(self.incus, handle, repository)
            enforced, not_enforced = await incus_app.read_back(
                self.incus, handle, profile=self.backend.profile
            )
            handle.manifest = manifest.of(
                handle,
                checkout,
                command=list(repository.command),
                enforcement=list(ENFORCERS),
                user=incus_image.APP_UID,
                enforced=enforced,
                not_enforced=not_enforced,
            )
            handle.manifest["container"] = handle.name
            await remember(self.incus, handle, manifest=handle.manifest)
        except IncusError as exc:
            await self._destroy(handle)
            raise SandboxError(f"Incus refused the sandbox: {exc.message}") from exc
        except BaseException:
            await self._destroy(handle)
            raise
        handle.state = SandboxState.HEALTHY
        handle.watcher = asyncio.ensure_future(self._watch(handle, repository))
        return handle

    def _write_checkout(self, handle: IncusSandbox, repository: Repository) -> Checkout:
        handle.folder.mkdir(mode=0o700)
        # The container's root is an unprivileged uid: it reads the checkout as "others".
        handle.checkout.mkdir(mode=0o755)
        return extract(
            Path(repository.path),
            handle.spec.commit,
            handle.checkout,
            max_bytes=self.config.sandboxes.budgets.checkout_bytes,
            max_files=self.config.sandboxes.budgets.checkout_files,
        )

    # -- health and the app dying mid-task ----------------------------------------------------

    async def health(self, handle: SandboxHandle) -> Health:
        assert isinstance(handle, IncusSandbox)
        return await probe.health(handle, handle.socket_path, self._health_path(handle))

    def _health_path(self, handle: IncusSandbox) -> str:
        repository = self.config.sandboxes.repositories.get(handle.spec.repository)
        return repository.health_path if repository is not None else "/"

    async def _watch(self, handle: IncusSandbox, repository: Repository) -> None:
        while not handle.torn_down():
            try:
                ended = await incus_app.exited(self.incus, handle, wait_s=WATCH_WAIT_S)
            except IncusError as exc:
                log.warning("sandbox %s: cannot watch its app: %s", handle.sandbox_id, exc)
                await asyncio.sleep(1.0)
                continue
            if ended is None or handle.torn_down():
                continue
            died = await incus_app.end_of(self.incus, ended)
            if not await self.restarted(handle, died, lambda: self._restart(handle, repository)):
                return

    async def _restart(self, handle: IncusSandbox, repository: Repository) -> None:
        try:
            commit = handle.manifest.get("commit", "")
            await incus_app.launch(self.incus, handle, repository, commit)
            await incus_app.until_healthy(self.incus, handle, repository)
        except IncusError as exc:
            raise SandboxError(str(exc)) from exc

    # -- another node's sandbox ---------------------------------------------------------------

    async def found(self) -> list[SandboxHandle]:
        """Every container of this deployment on the Incus, as handles (what a gateway
        that stopped without tearing down left, or another node's). One still being
        provisioned (bound, no manifest yet, its task not stored yet) is left out until
        it is older than any provisioning can take."""
        now = time.time()
        return [
            handle
            for handle in await self._containers()
            if handle.manifest or now - handle.bound_at > PROVISIONING_MAX_S
        ]

    async def _containers(self) -> list[IncusSandbox]:
        handles = []
        for instance in await self.incus.instances(prefix=self.backend.prefix):
            handle = from_config(instance, self.backend.deployment, self.blanks.socket_of)
            if handle is not None:
                handles.append(handle)
        return handles

    async def adopt(self, task_id: str) -> IncusSandbox | None:
        """The task's sandbox, taken over from whichever node made it; None if it has none
        here. Its app keeps running: only this node's view of it is new."""
        for handle in self._live.values():
            if handle.binding.task_id == task_id:
                return handle
        for handle in await self._containers():
            if handle.binding.task_id != task_id:
                continue
            repository = self.config.sandboxes.repositories.get(handle.spec.repository)
            if repository is None:
                return None
            running = await incus_app.exited(self.incus, handle, wait_s=0) is None
            # Another call took it over while this one asked Incus: one handle, one watcher.
            taken = self._live.get(handle.sandbox_id)
            if taken is not None:
                return taken
            handle.state = SandboxState.HEALTHY if running else SandboxState.DOWN
            self._live[handle.sandbox_id] = handle
            if handle.state is SandboxState.HEALTHY:
                handle.watcher = asyncio.ensure_future(self._watch(handle, repository))
            return handle
        return None

    async def release(self, handle: SandboxHandle) -> None:
        assert isinstance(handle, IncusSandbox)
        watcher, handle.watcher = handle.watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        self._live.pop(handle.sandbox_id, None)

    # -- teardown ------------------------------------------------------------------------------

    async def teardown(self, handle: SandboxHandle, *, keep_data: bool) -> Teardown:
        assert isinstance(handle, IncusSandbox)
        handle.state = SandboxState.TORN_DOWN
        watcher, handle.watcher = handle.watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        try:
            mine = await claim(self.incus, handle, self._claimant)
        except IncusError as exc:
            if not exc.not_found:
                raise SandboxError(f"Incus refused the teardown: {exc.message}") from exc
            mine = True  # already gone: what is left on this machine is still removed
        if not mine:
            # Another node tears it down: it is done when the container is gone.
            left = await self._gone(handle)
            self._live.pop(handle.sandbox_id, None)
            return Teardown(processes_left=left)
        data, note = None, None
        with contextlib.suppress(IncusError):
            # The app first, so nothing it does races the archive.
            await self.incus.run(
                handle.name,
                [sys.executable, "-I", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                user=incus_image.APP_UID,
            )
        if keep_data:
            most = self.config.sandboxes.keep_data_max_bytes
            data, note = await incus_app.archive_data(self.incus, handle, most)
        await self._destroy(handle)
        left = await self._gone(handle, wait_s=0)
        return Teardown(processes_left=left, data=data, data_note=note)

    async def _destroy(self, handle: IncusSandbox) -> None:
        """Remove the container and what this machine holds for it (Incus leaves a proxy
        device's socket file behind)."""
        if handle.name:
            try:
                await self.incus.delete_forced(handle.name)
            except IncusError as exc:
                if not exc.not_found:
                    log.error(
                        "sandbox %s: the container was not deleted: %s", handle.sandbox_id, exc
                    )
        with contextlib.suppress(OSError):
            handle.socket_path.unlink()
        try:
            await asyncio.to_thread(tree.remove, handle.folder)
        except OSError as exc:
            log.error("sandbox %s: its checkout was not removed: %s", handle.sandbox_id, exc)
        self._live.pop(handle.sandbox_id, None)

    async def _gone(self, handle: IncusSandbox, *, wait_s: float = GONE_WAIT_S) -> int:
        """0 once the container is gone (waiting up to `wait_s`); else its processes."""
        if not handle.name:
            return 0
        deadline = time.monotonic() + wait_s
        while True:
            try:
                state = await self.incus.state(handle.name)
            except IncusError as exc:
                if exc.not_found:
                    return 0
                raise
            if time.monotonic() >= deadline:
                return int(state.get("processes") or 0) or 1
            await asyncio.sleep(0.2)
