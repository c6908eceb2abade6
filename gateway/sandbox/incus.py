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
4. starts the app with `incus_launcher.py` as the container's `app` user: rlimits set, a
   listening unix socket handed over as standard input; a proxy device makes that socket
   a unix socket on this machine (`<socket dir>/<id>.sock`, mode 0600), which is how the
   task's guard reaches the app;
5. waits for `health_path` to answer 2xx, and writes the manifest, with every limit as the
   kernel holds it (read back from Incus and from inside), never as asked.

The container, not a gateway process, is the sandbox: what a node knows of it is written
into the container's own config (`user.gateway.*`: the task it is bound to, the spec, the
manifest, the app's exec operation), so any node of a cluster that reaches the same Incus
can take it over (`adopt`) when the task moves there, and can tear it down. Teardown is
claimed with a compare-and-set on the container's ETag, so of several nodes ending one
task exactly one archives its data and deletes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import (
    DEFAULT_BUDGETS,
    Budgets,
    IncusBackend,
    Limits,
    Provision,
    Repository,
)

from . import incus_image, incus_launcher, incus_readback, manifest, probe, tree
from .checkout import extract, resolve_commit
from .errors import SandboxError, Unhealthy
from .incus_api import Endpoint, Incus, IncusError
from .incus_blanks import (
    APP_SOCKET,
    KEY,
    REFUSED_SYSCALLS,
    Blanks,
    config_time,
    read_only,
    runtime_paths,
)
from .provider import Binding, Health, SandboxHandle, SandboxProvider, SandboxState, Teardown
from .registration import check

log = logging.getLogger(__name__)

# The launcher's and the read-back's sources, passed to the container's interpreter with
# `-I -c` (isolated: nothing of the checkout, the working folder or the environment is
# imported before the limits are set).
LAUNCHER = Path(incus_launcher.__file__).read_text()
READBACK = Path(incus_readback.__file__).read_text()

PYTHON = "{python}"
PROBE_INTERVAL_S = 0.05
WATCH_WAIT_S = 30.0
GONE_WAIT_S = 30.0
# A teardown claimed this long ago and not done is a dead process's: another takes it over.
CLAIM_STALE_S = 120.0
# Longer than any provisioning (a registration's ready timeout is at most 600 s).
PROVISIONING_MAX_S = 900.0
MIB = 1024 * 1024
# Where apps' sockets appear by default: short (a unix socket's path has at most 107
# bytes) and the same for every node of a cluster on one machine.
SOCKET_ROOT = "/run/gateway-incus"
MAX_SOCKET_PATH = 107
# What the manifest's `enforced_by` names for each mechanism.
ENFORCERS = ("incus:cgroup", "incus:unprivileged", "incus:no-network", "tmpfs", "rlimit")


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
        self.provider = IncusProvider.name
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


class IncusProvider(SandboxProvider):
    name = "incus"
    durable = True

    def __init__(
        self,
        backend: IncusBackend,
        *,
        root: Path,
        repositories: dict[str, Repository],
        max_limits: Limits,
        max_live: int,
        budgets: Budgets = DEFAULT_BUDGETS,
        domain: str = "sandbox.internal",
        keep_data_max_bytes: int = 64 * MIB,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.root = root / "incus"
        self.socket_dir = Path(backend.socket_dir or f"{SOCKET_ROOT}/{backend.deployment}")
        self.repositories = dict(repositories)
        self.max_limits = max_limits
        self.max_live = max_live
        self.budgets = budgets
        self.domain = domain
        self.keep_data_max_bytes = keep_data_max_bytes
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
            budgets=budgets,
            claimant=self._claimant,
        )

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
            await self._prepare_backend()
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

    async def _prepare_backend(self) -> None:
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

    # -- provisioning -------------------------------------------------------------------------

    async def provision(self, spec: Provision, binding: Binding) -> IncusSandbox:
        repository, limits = check(spec, self.repositories, self.max_limits)
        if not self._prepared:
            # Incus could not be reached at start: its pool, profile and image are made now.
            try:
                await self._prepare_backend()
            except IncusError as exc:
                raise SandboxError(f"Incus cannot be reached: {exc.message}") from exc
            self._prepared = True
        if len(self._live) + self._reserved >= self.max_live:
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
            origin=f"http://{sandbox_id}.{self.domain}",
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
            await self._bind_container(handle, repository, checkout.commit)
            await self._launch(handle, repository, checkout.commit)
            await self._until_healthy(handle, repository)
            enforced, not_enforced = await self._read_back(handle)
            handle.manifest = manifest.build(
                provider=self.name,
                sandbox_id=sandbox_id,
                spec=spec,
                commit=checkout.commit,
                tree=checkout.public(),
                command=list(repository.command),
                limits=limits,
                enforcement=list(ENFORCERS),
                origin=handle.origin,
                binding=binding,
                started_at=time.time(),
                user=incus_image.APP_UID,
                enforced=enforced,
                not_enforced=not_enforced,
            )
            handle.manifest["container"] = handle.name
            await self._remember(handle, manifest=handle.manifest)
        except IncusError as exc:
            await self._destroy(handle)
            raise SandboxError(f"Incus refused the sandbox: {exc.message}") from exc
        except BaseException:
            await self._destroy(handle)
            raise
        handle.state = SandboxState.HEALTHY
        handle.watcher = asyncio.ensure_future(self._watch(handle, repository))
        return handle

    def _write_checkout(self, handle: IncusSandbox, repository: Repository) -> Any:
        handle.folder.mkdir(mode=0o700)
        # The container's root is an unprivileged uid: it reads the checkout as "others".
        handle.checkout.mkdir(mode=0o755)
        return extract(
            Path(repository.path),
            handle.spec.commit,
            handle.checkout,
            max_bytes=self.budgets.checkout_bytes,
            max_files=self.budgets.checkout_files,
        )

    async def _bind_container(
        self, handle: IncusSandbox, repository: Repository, commit: str
    ) -> None:
        """Make a started blank the task's: its limits, its checkout, its socket, and the
        binding any node reads it back from, in one change (devices are hot-plugged)."""
        limits = handle.limits
        found, etag = await self.incus.instance(handle.name)
        config = dict(found.get("config") or {})
        config.pop(f"{KEY}blank", None)
        for blank_limit in ("limits.processes", "limits.memory"):
            config.pop(blank_limit, None)
        if limits.memory_mb is not None:
            config["limits.memory"] = f"{limits.memory_mb}MiB"
            config["limits.memory.swap"] = "false"
        if limits.processes is not None:
            config["limits.processes"] = str(limits.processes + 1)  # and the container's init
        config.update(self._binding_config(handle, commit))
        devices = dict(found.get("devices") or {})
        devices["app"] = {**read_only(str(handle.checkout)), "path": "/app"}
        for index, path in enumerate(runtime_paths(repository.read_only)):
            devices[f"runtime{index}"] = read_only(path)
        await self.incus.replace_instance(
            handle.name, {**found, "config": config, "devices": devices}, etag=etag
        )

    def _binding_config(self, handle: IncusSandbox, commit: str) -> dict[str, str]:
        b = handle.binding
        return {
            f"{KEY}deployment": self.backend.deployment,
            f"{KEY}sandbox": handle.sandbox_id,
            f"{KEY}task": b.task_id,
            f"{KEY}org": b.org_id,
            f"{KEY}actor": b.actor_id,
            f"{KEY}expires": b.expires_at.isoformat(),
            f"{KEY}spec": handle.spec.model_dump_json(),
            f"{KEY}limits": handle.limits.model_dump_json(),
            f"{KEY}commit": commit,
            f"{KEY}origin": handle.origin,
            f"{KEY}folder": str(handle.folder),
            f"{KEY}socket": str(handle.socket_path),
            f"{KEY}bound": f"{time.time():.0f}",
        }

    async def _remember(self, handle: IncusSandbox, **values: Any) -> None:
        """Write what another node needs to take this sandbox over into its config."""
        found, etag = await self.incus.instance(handle.name)
        config = dict(found.get("config") or {})
        for name, value in values.items():
            config[f"{KEY}{name}"] = value if isinstance(value, str) else json.dumps(value)
        await self.incus.patch_instance(handle.name, {"config": config}, etag=etag)

    async def _launch(self, handle: IncusSandbox, repository: Repository, commit: str) -> None:
        command = [sys.executable if part == PYTHON else part for part in repository.command]
        plan = {
            "limits": handle.limits.model_dump(),
            "socket": APP_SOCKET,
            "argv": command,
        }
        env = {
            **handle.spec.env,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/data",
            "TMPDIR": "/tmp",  # noqa: S108 - the container's own
            "LANG": "C.UTF-8",
            "SANDBOX_ID": handle.sandbox_id,
            "SANDBOX_COMMIT": commit,
            "SANDBOX_ORIGIN": handle.origin,
            "SANDBOX_DATA": "/data",
            "SANDBOX_LISTEN_FD": "0",
        }
        launcher = LAUNCHER
        handle.exec_id = await self.incus.exec(
            handle.name,
            [sys.executable, "-I", "-c", launcher, json.dumps(plan)],
            env=env,
            user=incus_image.APP_UID,
            cwd="/app",
        )
        with contextlib.suppress(IncusError):
            await self._remember(handle, exec=handle.exec_id, restarts=str(handle.restarts))

    async def _exited(self, handle: IncusSandbox, *, wait_s: float) -> dict[str, Any] | None:
        """The app's exec operation once it ended (waiting up to `wait_s`); None while it
        runs."""
        if handle.exec_id is None:
            return {"status": "gone"}
        try:
            state = await self.incus.operation_state(handle.exec_id, wait_s=wait_s)
        except IncusError as exc:
            if exc.not_found:
                return {"status": "gone"}
            raise
        if state.get("status") == "Running":
            return None
        return state

    async def _until_healthy(self, handle: IncusSandbox, repository: Repository) -> None:
        deadline = time.monotonic() + repository.ready_timeout_s
        while True:
            ended = await self._exited(handle, wait_s=0)
            if ended is not None:
                code = (ended.get("metadata") or {}).get("return")
                raise Unhealthy(
                    f"the app exited ({code}) before it was healthy",
                    details={
                        "exit_code": code,
                        "error": ended.get("err") or None,
                        "log": await self._log(ended),
                    },
                )
            status = await probe.status(handle.socket_path, handle.origin, repository.health_path)
            if status is not None and 200 <= status < 300:
                return
            if time.monotonic() >= deadline:
                raise Unhealthy(
                    f"the app did not answer {repository.health_path} with 2xx within "
                    f"{repository.ready_timeout_s:g} s",
                    details={"last_status": status},
                )
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def _log(self, ended: dict[str, Any]) -> str:
        outputs = (ended.get("metadata") or {}).get("output") or {}
        parts = []
        for key in ("1", "2"):
            if outputs.get(key):
                with contextlib.suppress(IncusError):
                    parts.append(await self.incus.log(outputs[key], limit=64 * 1024))
        return b"".join(parts).decode("utf-8", "replace")[-500:]

    async def _read_back(self, handle: IncusSandbox) -> tuple[dict[str, Any], list[str]]:
        """What the kernel holds the running sandbox to (the cgroup's limits from Incus,
        the rest read inside as root: `incus_readback.py`), in the shape `local` reports
        it, and what nothing holds."""
        state = await self.incus.state(handle.name)
        found, _etag = await self.incus.instance(handle.name)
        config = found.get("expanded_config") or {}
        if any(d.get("type") == "nic" for d in (found.get("expanded_devices") or {}).values()):
            raise SandboxError(
                f"the container has a network card (profile {self.backend.profile!r}?): "
                "a sandbox gets none"
            )
        code, raw = await self.incus.run(
            handle.name, [sys.executable, "-I", "-c", READBACK, str(incus_image.APP_UID)]
        )
        try:
            report = json.loads(raw)
            rlimits, sizes = dict(report["rlimits"]), dict(report["filesystems"])
        except (ValueError, TypeError, KeyError) as exc:
            raise SandboxError(
                f"the sandbox's limits could not be read back (exit {code}): {exc}"
            ) from exc
        enforced: dict[str, Any] = {
            "refused_calls": sorted(REFUSED_SYSCALLS),
            "rlimits": rlimits,
            "cgroup": {
                "by": "incus",
                "memory.max": (state.get("memory") or {}).get("total"),
                "pids.max": config.get("limits.processes"),
            },
            "data": {"by": "tmpfs", "bytes": sizes.get("/data")},
            "tmp": {"by": "tmpfs", "bytes": sizes.get("/tmp")},  # noqa: S108
            "user_namespaces": (
                "refused" if config.get("linux.sysctl.user.max_user_namespaces") == "0" else None
            ),
            "network": report.get("interfaces"),
            "uid": incus_image.APP_UID if report.get("processes") else None,
            "container": {"privileged": config.get("security.privileged") == "true"},
        }
        not_enforced = [
            f"cpu_s ({handle.limits.cpu_s}) bounds each process's CPU time, not the sandbox's",
        ]
        if enforced["cgroup"]["memory.max"] is None:
            not_enforced.append("Incus reported no memory limit: memory_mb is not held")
        return enforced, not_enforced

    # -- health and the app dying mid-task ----------------------------------------------------

    async def health(self, handle: SandboxHandle) -> Health:
        assert isinstance(handle, IncusSandbox)
        if handle.state in (SandboxState.TORN_DOWN, SandboxState.DOWN):
            return Health(handle.state, False)
        path = self._health_path(handle)
        status = await probe.status(handle.socket_path, handle.origin, path)
        healthy = status is not None and 200 <= status < 300
        return Health(handle.state, healthy, None if healthy else f"health answer: {status}")

    def _health_path(self, handle: IncusSandbox) -> str:
        repository = self.repositories.get(handle.spec.repository)
        return repository.health_path if repository is not None else "/"

    async def _watch(self, handle: IncusSandbox, repository: Repository) -> None:
        while not handle.torn_down():
            try:
                ended = await self._exited(handle, wait_s=WATCH_WAIT_S)
            except IncusError as exc:
                log.warning("sandbox %s: cannot watch its app: %s", handle.sandbox_id, exc)
                await asyncio.sleep(1.0)
                continue
            if ended is None or handle.torn_down():
                continue
            died = {
                "exit_code": (ended.get("metadata") or {}).get("return"),
                "log": await self._log(ended),
            }
            if handle.restarts >= 1:
                self.changed(handle, SandboxState.DOWN, {**died, "restarts": handle.restarts})
                return
            handle.restarts += 1
            self.changed(handle, SandboxState.RESTARTING, died)
            try:
                commit = handle.manifest.get("commit", "")
                await self._launch(handle, repository, commit)
                await self._until_healthy(handle, repository)
            except (SandboxError, IncusError) as exc:
                message = exc.message if isinstance(exc, SandboxError) else str(exc)
                self.changed(
                    handle, SandboxState.DOWN, {"error": message, "restarts": handle.restarts}
                )
                return
            if handle.torn_down():
                return
            self.changed(handle, SandboxState.HEALTHY, {"restarts": handle.restarts})

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
            handle = self._from_config(instance)
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
            repository = self.repositories.get(handle.spec.repository)
            if repository is None:
                return None
            running = await self._exited(handle, wait_s=0) is None
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

    def _from_config(self, instance: dict[str, Any]) -> IncusSandbox | None:
        config = instance.get("config") or {}
        if config.get(f"{KEY}deployment") != self.backend.deployment:
            return None
        if f"{KEY}blank" in config:
            return None  # no task's yet
        _holder, _, since = str(config.get(f"{KEY}teardown", "")).partition("@")
        if since and time.time() - config_time(since) < CLAIM_STALE_S:
            return None  # being torn down (a claim older than that is a dead process's)
        try:
            binding = Binding(
                task_id=config[f"{KEY}task"],
                org_id=config[f"{KEY}org"],
                actor_id=config[f"{KEY}actor"],
                expires_at=datetime.fromisoformat(config[f"{KEY}expires"]),
            )
            sandbox_id = config[f"{KEY}sandbox"]
            folder, socket_path = Path(config[f"{KEY}folder"]), Path(config[f"{KEY}socket"])
            # Paths this process removes at teardown: only ever a sandbox's own.
            if (
                socket_path != self.blanks.socket_of(instance["name"])
                or folder.name != sandbox_id
                or folder.parent.name != "incus"
                or not folder.is_absolute()
                or ".." in folder.parts
            ):
                raise ValueError(f"its paths are not a sandbox's: {folder}, {socket_path}")
            handle = IncusSandbox(
                sandbox_id=sandbox_id,
                name=instance["name"],
                origin=config[f"{KEY}origin"],
                binding=binding,
                spec=Provision.model_validate_json(config[f"{KEY}spec"]),
                limits=Limits.model_validate_json(config[f"{KEY}limits"]),
                folder=folder,
                socket_path=socket_path,
            )
            handle.manifest = json.loads(config.get(f"{KEY}manifest", "{}"))
            handle.exec_id = config.get(f"{KEY}exec")
            handle.bound_at = config_time(config.get(f"{KEY}bound", ""))
            handle.restarts = int(config.get(f"{KEY}restarts", "0"))
        except (KeyError, ValueError) as exc:
            log.warning("container %s has no readable binding: %s", instance.get("name"), exc)
            return None
        return handle

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
            mine = await self._claim(handle)
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
            data, note = await self._archive(handle)
        await self._destroy(handle)
        left = await self._gone(handle, wait_s=0)
        return Teardown(processes_left=left, data=data, data_note=note)

    async def _claim(self, handle: IncusSandbox) -> bool:
        """Mark the container as torn down by this process; False when another one holds
        that mark. A mark older than `CLAIM_STALE_S` is a process that died mid-teardown:
        it is taken over."""
        while True:
            found, etag = await self.incus.instance(handle.name)
            config = dict(found.get("config") or {})
            holder, _, since = str(config.get(f"{KEY}teardown", "")).partition("@")
            if holder == self._claimant:
                return True
            if holder and time.time() - config_time(since) < CLAIM_STALE_S:
                return False
            config[f"{KEY}teardown"] = f"{self._claimant}@{time.time():.0f}"
            try:
                await self.incus.patch_instance(handle.name, {"config": config}, etag=etag)
            except IncusError as exc:
                if exc.conflict:
                    continue  # changed meanwhile: read it again
                raise
            return True

    async def _archive(self, handle: IncusSandbox) -> tuple[bytes | None, str | None]:
        script = (
            "import sys, tarfile\n"
            "with tarfile.open(fileobj=sys.stdout.buffer, mode='w|gz') as tar:\n"
            "    tar.add('/data', arcname='data')\n"
        )
        try:
            code, data = await self.incus.run(
                handle.name,
                [sys.executable, "-I", "-c", script],
                limit=self.keep_data_max_bytes,
            )
        except IncusError as exc:
            if exc.status == 413:
                return None, (
                    f"the data folder holds more than {self.keep_data_max_bytes} bytes, "
                    "the most kept"
                )
            return None, f"the data folder could not be archived: {exc.message}"
        if code != 0:
            return None, f"the data folder could not be archived (exit {code})"
        return data, None

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


def incus_reachable(socket_path: str) -> bool:
    """Whether an Incus answers on this machine's socket (for tests and set-up scripts)."""
    probe_socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe_socket.settimeout(2)
        probe_socket.connect(socket_path)
    except OSError:
        return False
    finally:
        probe_socket.close()
    return True
