"""The `local` provider: each task's app in a bubblewrap jail on the gateway's own machine.

For one task it:

1. checks the spec against the registration (repository, environment names, limits);
2. writes the commit into `<sandbox dir>/<id>/app` (`checkout.py`), makes a private
   `data` folder owned by the sandbox's user, and binds the app's listening unix socket
   (`app.sock`, in a folder the sandbox never sees, so nothing the app does can point the
   gateway's connections elsewhere);
3. starts the app's command in its jail (`bubblewrap.py`), as a user of its own: uid
   `GATEWAY_SANDBOX_UID_BASE + slot`, one slot per live sandbox, so the process limit,
   file ownership and signals of one sandbox never touch another's;
4. waits for `health_path` to answer 2xx through the socket, within the registration's
   `ready_timeout_s`; anything short of that tears it all down and raises.

While the task lives, a watcher waits on the jail: when the app exits, it is started once
more (same checkout, same data, same socket, so the origin does not change); when it exits
again it stays down. Teardown kills the jail's PID namespace (every process in it goes with
its init), then any process of the sandbox's user, counts what is left from /proc, keeps
the data folder as a gzipped tar when asked, and removes the folder.

It runs as root only: giving each sandbox a user of its own, and the namespaces without
a user namespace, need it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import manifest
from .bubblewrap import APP_DIR, DATA_DIR, LISTEN_FD, JailPlan, command_line, find_tools
from .cgroup import CgroupParent
from .checkout import extract, resolve_commit
from .errors import SandboxError, SandboxRefused, Unhealthy
from .provider import Binding, Health, SandboxHandle, SandboxProvider, SandboxState, Teardown
from .spec import Limits, Provision, Repository

log = logging.getLogger(__name__)

PYTHON = "{python}"
PROBE_TIMEOUT_S = 2.0
PROBE_INTERVAL_S = 0.05
KILL_WAIT_S = 5.0
INFO_TIMEOUT_S = 10.0
LOG_TAIL_BYTES = 2000
PROC = Path("/proc")


class LocalSandbox(SandboxHandle):
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
        self.provider = LocalProvider.name
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
        self.pid_namespace: int | None = None
        self.cgroup: Path | None = None
        self.watcher: asyncio.Task[None] | None = None

    @property
    def checkout(self) -> Path:
        return self.folder / "app"

    @property
    def data(self) -> Path:
        return self.folder / "data"

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

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


class LocalProvider(SandboxProvider):
    name = "local"

    def __init__(
        self,
        *,
        root: Path,
        repositories: Mapping[str, Repository],
        max_limits: Limits,
        uid_base: int,
        max_live: int,
        domain: str = "sandbox.internal",
        cgroup: CgroupParent | None = None,
        keep_data_max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        super().__init__()
        self.root = root
        self.repositories = dict(repositories)
        self.max_limits = max_limits
        self.uid_base = uid_base
        self.domain = domain
        self.cgroup = cgroup
        self.keep_data_max_bytes = keep_data_max_bytes
        self._free_slots = list(range(max_live))
        self._live: dict[str, LocalSandbox] = {}

    # -- the gateway's lifetime -----------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self._clear_root)

    def _clear_root(self) -> None:
        # What a gateway that stopped without tearing down left: its jails died with it
        # (`--die-with-parent`); their folders are removed here.
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        for entry in self.root.iterdir():
            if entry.name.startswith("sbx-"):
                shutil.rmtree(entry, ignore_errors=True)

    async def close(self) -> None:
        for handle in list(self._live.values()):
            await self.teardown(handle, keep_data=False)

    def live(self) -> list[LocalSandbox]:
        return list(self._live.values())

    # -- provisioning -----------------------------------------------------------------------

    def _check(self, spec: Provision) -> tuple[Repository, Limits]:
        repository = self.repositories.get(spec.repository)
        if repository is None:
            raise SandboxRefused(
                f"no repository {spec.repository!r} is registered for sandboxes",
                field="repository",
            )
        unlisted = sorted(set(spec.env) - set(repository.env))
        if unlisted:
            raise SandboxRefused(
                f"the repository's registration does not allow the variables {unlisted}",
                field="env",
                names=unlisted,
            )
        limits, over = spec.limits.within(self.max_limits)
        if over:
            raise SandboxRefused(
                f"limits above the gateway's maximum: {over}",
                field="limits",
                names=over,
                maximum=self.max_limits.model_dump(),
            )
        return repository, limits

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
        slot = self._free_slots.pop(0)
        sandbox_id = f"sbx-{secrets.token_hex(8)}"
        handle = LocalSandbox(
            sandbox_id=sandbox_id,
            origin=f"http://{sandbox_id}.{self.domain}",
            binding=binding,
            spec=spec,
            repository=repository,
            limits=limits,
            folder=self.root / sandbox_id,
            uid=self.uid_base + slot,
            slot=slot,
        )
        self._live[sandbox_id] = handle
        try:
            checkout = await asyncio.to_thread(self._prepare, handle)
            await self._start(handle)
            await self._until_healthy(handle)
        except BaseException:
            await self._destroy(handle)
            raise
        handle.manifest = manifest.build(
            provider=self.name,
            sandbox_id=sandbox_id,
            spec=spec,
            commit=checkout.commit,
            tree=checkout.public(),
            # As registered: `{python}` is the gateway's interpreter (a host path, which
            # evidence would not keep anyway).
            command=list(handle.repository.command),
            limits=limits,
            enforcement=["rlimit", *(["cgroup2"] if handle.cgroup is not None else [])],
            origin=handle.origin,
            binding=binding,
            started_at=time.time(),
            user=handle.uid,
        )
        handle.state = SandboxState.HEALTHY
        handle.watcher = asyncio.ensure_future(self._watch(handle))
        return handle

    def _prepare(self, handle: LocalSandbox) -> Any:
        self.root.mkdir(parents=True, exist_ok=True)
        handle.folder.mkdir(mode=0o700)
        handle.checkout.mkdir()
        checkout = extract(Path(handle.repository.path), handle.spec.commit, handle.checkout)
        handle.data.mkdir(mode=0o700)
        os.chown(handle.data, handle.uid, handle.uid)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(handle.socket_path))
        listener.listen(128)
        handle.listener = listener
        handle.command = self._command(handle.repository)
        handle.env = {
            **handle.spec.env,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": DATA_DIR,
            "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own tmpfs
            "LANG": "C.UTF-8",
            "SANDBOX_ID": handle.sandbox_id,
            "SANDBOX_COMMIT": checkout.commit,
            "SANDBOX_ORIGIN": handle.origin,
            "SANDBOX_DATA": DATA_DIR,
            "SANDBOX_LISTEN_FD": str(LISTEN_FD),
        }
        if self.cgroup is not None:
            handle.cgroup = self.cgroup.create(handle.sandbox_id, handle.limits)
        return checkout

    @staticmethod
    def _command(repository: Repository) -> list[str]:
        python = sys.executable
        return [python if part == PYTHON else part for part in repository.command]

    def _read_only(self, repository: Repository) -> list[str]:
        paths = list(repository.read_only)
        if PYTHON in repository.command:
            # The gateway's own interpreter and what is installed for it, read-only.
            paths += [sys.prefix, sys.base_prefix]
        return list(dict.fromkeys(paths))

    async def _start(self, handle: LocalSandbox) -> None:
        assert handle.listener is not None
        info_read, info_write = os.pipe()
        plan = JailPlan(
            checkout=handle.checkout,
            data=handle.data,
            uid=handle.uid,
            gid=handle.uid,
            limits=handle.limits,
            env=handle.env,
            command=handle.command,
            read_only=self._read_only(handle.repository),
            info_fd=info_write,
        )
        argv = command_line(plan)
        if handle.cgroup is not None:
            argv = [*CgroupParent.enter_prefix(handle.cgroup), *argv]
        log_fd = os.open(handle.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            handle.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=handle.listener.fileno(),
                stdout=log_fd,
                stderr=log_fd,
                pass_fds=(info_write,),
                env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                # Not in the gateway's process group: a Ctrl-C is the gateway's to handle,
                # which tears its sandboxes down in order.
                start_new_session=True,
            )
        finally:
            os.close(log_fd)
            os.close(info_write)
        try:
            child = await asyncio.wait_for(_child_pid(info_read), INFO_TIMEOUT_S)
        except (TimeoutError, ValueError, OSError):
            child = None
        finally:
            os.close(info_read)
        if child is None:
            code = await _exit_code(handle.process)
            raise Unhealthy(
                "the sandbox's jail did not start",
                details={"exit_code": code, "log": handle.log_tail()[-500:]},
            )
        with contextlib.suppress(OSError):
            handle.pid_namespace = os.stat(PROC / str(child) / "ns" / "pid").st_ino

    async def _until_healthy(self, handle: LocalSandbox) -> None:
        deadline = time.monotonic() + handle.repository.ready_timeout_s
        while True:
            process = handle.process
            if process is not None and process.returncode is not None:
                raise Unhealthy(
                    f"the app exited ({process.returncode}) before it was healthy",
                    details={"exit_code": process.returncode, "log": handle.log_tail()[-500:]},
                )
            status = await self._probe(handle)
            if status is not None and 200 <= status < 300:
                return
            if time.monotonic() >= deadline:
                raise Unhealthy(
                    f"the app did not answer {handle.repository.health_path} with 2xx within "
                    f"{handle.repository.ready_timeout_s:g} s",
                    details={"last_status": status, "log": handle.log_tail()[-500:]},
                )
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def _probe(self, handle: LocalSandbox) -> int | None:
        """The status the app answers its health path with now; None if no answer."""
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                reader, writer = await handle.open_connection()
                host = urlsplit(handle.origin).netloc
                writer.write(
                    f"GET {handle.repository.health_path} HTTP/1.1\r\nHost: {host}\r\n"
                    "Connection: close\r\n\r\n".encode()
                )
                await writer.drain()
                line = await reader.readline()
            parts = line.split()
            return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
        except (OSError, TimeoutError, ValueError):
            return None
        finally:
            if writer is not None:
                writer.close()

    async def health(self, handle: SandboxHandle) -> Health:
        assert isinstance(handle, LocalSandbox)
        if handle.state in (SandboxState.TORN_DOWN, SandboxState.DOWN):
            return Health(handle.state, False)
        status = await self._probe(handle)
        healthy = status is not None and 200 <= status < 300
        return Health(handle.state, healthy, None if healthy else f"health answer: {status}")

    # -- the app dying mid-task -----------------------------------------------------------

    async def _watch(self, handle: LocalSandbox) -> None:
        while True:
            assert handle.process is not None
            code = await handle.process.wait()
            if handle.state is SandboxState.TORN_DOWN:
                return
            await self._kill(handle)
            died = {"exit_code": code, "log": handle.log_tail()[-500:]}
            if handle.restarts >= 1:
                self.changed(handle, SandboxState.DOWN, {**died, "restarts": handle.restarts})
                return
            handle.restarts += 1
            self.changed(handle, SandboxState.RESTARTING, died)
            try:
                await self._start(handle)
                await self._until_healthy(handle)
            except SandboxError as exc:
                await self._kill(handle)
                self.changed(
                    handle, SandboxState.DOWN, {"error": exc.message, "restarts": handle.restarts}
                )
                return
            if handle.torn_down():
                return
            self.changed(handle, SandboxState.HEALTHY, {"restarts": handle.restarts})

    # -- teardown ---------------------------------------------------------------------------

    async def teardown(self, handle: SandboxHandle, *, keep_data: bool) -> Teardown:
        assert isinstance(handle, LocalSandbox)
        handle.state = SandboxState.TORN_DOWN
        watcher, handle.watcher = handle.watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        left = await self._kill(handle)
        data, note = None, None
        if keep_data and handle.data.exists():
            data, note = await asyncio.to_thread(_archive, handle.data, self.keep_data_max_bytes)
        await self._destroy(handle, left=left)
        return Teardown(processes_left=left, data=data, data_note=note)

    async def _kill(self, handle: LocalSandbox) -> int:
        """Kill every process of the sandbox; returns how many are still there after."""
        process = handle.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()  # bwrap: its init, and with it the PID namespace, follow
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            found = sandbox_processes(handle.uid, handle.pid_namespace)
            for pid in found:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if process is not None and process.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 0.1)
            elif not found:
                return 0
            if time.monotonic() >= deadline:
                return len(sandbox_processes(handle.uid, handle.pid_namespace))
            if found:
                await asyncio.sleep(0.02)

    async def _destroy(self, handle: LocalSandbox, *, left: int | None = None) -> None:
        """Remove what provisioning made; the slot is free again only when no process of
        its user is left."""
        if left is None:
            left = await self._kill(handle)
        if handle.listener is not None:
            handle.listener.close()
            handle.listener = None
        if handle.cgroup is not None:
            CgroupParent.remove(handle.cgroup)
        await asyncio.to_thread(shutil.rmtree, handle.folder, True)
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


def sandbox_processes(uid: int, pid_namespace: int | None) -> list[int]:
    """Processes that belong to a sandbox: of its user, or in its PID namespace."""
    found = []
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            if pid_namespace is not None and (
                os.stat(PROC / entry / "ns" / "pid").st_ino == pid_namespace
            ):
                found.append(int(entry))
                continue
            status = (PROC / entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if int(line.split()[1]) == uid:
                    found.append(int(entry))
                break
    return found


async def _child_pid(fd: int) -> int:
    """The pid bwrap reports for the sandbox's init (`--info-fd`)."""
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    raw = b""
    while b"}" not in raw:
        readable: asyncio.Future[None] = loop.create_future()

        def ready(future: asyncio.Future[None] = readable) -> None:
            if not future.done():
                future.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            raise ValueError("the jail ended before it reported")
        raw += chunk
    return int(json.loads(raw[: raw.index(b"}") + 1])["child-pid"])


async def _exit_code(process: asyncio.subprocess.Process) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(process.wait(), 2.0)
    return None


def _archive(folder: Path, max_bytes: int) -> tuple[bytes | None, str | None]:
    """The folder as a gzipped tar (links kept as links, never followed)."""
    size = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(parent, name)).st_size
    if size > max_bytes:
        return None, f"the data folder holds {size} bytes, more than the {max_bytes} kept"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname="data")
    return buffer.getvalue(), None


__all__ = ["APP_DIR", "LocalProvider", "LocalSandbox", "host_unready", "sandbox_processes"]
