"""A task's app inside its Incus container: launched, watched for its end, waited for until
healthy, the limits the kernel holds it to read back, and its data archived.

The app is started with `incus_launcher.py` as the container's `app` user (rlimits set, a
listening unix socket handed over as standard input); its exec operation is how a node
knows it still runs. The read-back (`incus_readback.py`) runs inside as root.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Repository

from . import incus_image, incus_launcher, incus_readback, probe
from .errors import SandboxError
from .incus_api import Incus, IncusError
from .incus_binding import remember
from .incus_blanks import APP_SOCKET, REFUSED_SYSCALLS
from .incus_sandbox import IncusSandbox

# The launcher's and the read-back's sources, passed to the container's interpreter with
# `-I -c` (isolated: nothing of the checkout, the working folder or the environment is
# imported before the limits are set).
LAUNCHER = Path(incus_launcher.__file__).read_text()
READBACK = Path(incus_readback.__file__).read_text()

PYTHON = "{python}"


async def launch(incus: Incus, handle: IncusSandbox, repository: Repository, commit: str) -> None:
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
    handle.exec_id = await incus.exec(
        handle.name,
        [sys.executable, "-I", "-c", LAUNCHER, json.dumps(plan)],
        env=env,
        user=incus_image.APP_UID,
        cwd="/app",
    )
    with contextlib.suppress(IncusError):
        await remember(incus, handle, exec=handle.exec_id, restarts=str(handle.restarts))


async def exited(incus: Incus, handle: IncusSandbox, *, wait_s: float) -> dict[str, Any] | None:
    """The app's exec operation once it ended (waiting up to `wait_s`); None while it
    runs."""
    if handle.exec_id is None:
        return {"status": "gone"}
    try:
        state = await incus.operation_state(handle.exec_id, wait_s=wait_s)
    except IncusError as exc:
        if exc.not_found:
            return {"status": "gone"}
        raise
    if state.get("status") == "Running":
        return None
    return state


async def until_healthy(incus: Incus, handle: IncusSandbox, repository: Repository) -> None:
    async def ended() -> dict[str, Any] | None:
        state = await exited(incus, handle, wait_s=0)
        if state is None:
            return None
        return {**await end_of(incus, state), "error": state.get("err") or None}

    await probe.until_healthy(handle.socket_path, handle.origin, repository, ended)


async def end_of(incus: Incus, ended: dict[str, Any]) -> dict[str, Any]:
    """What an ended exec operation says of the app's end: its exit code and the end of
    what it wrote."""
    return {
        "exit_code": (ended.get("metadata") or {}).get("return"),
        "log": await _output(incus, ended),
    }


async def _output(incus: Incus, ended: dict[str, Any]) -> str:
    """The end of what an ended exec operation wrote."""
    outputs = (ended.get("metadata") or {}).get("output") or {}
    parts = []
    for key in ("1", "2"):
        if outputs.get(key):
            with contextlib.suppress(IncusError):
                parts.append(await incus.log(outputs[key], limit=64 * 1024))
    return b"".join(parts).decode("utf-8", "replace")[-500:]


async def read_back(
    incus: Incus, handle: IncusSandbox, *, profile: str
) -> tuple[dict[str, Any], list[str]]:
    """What the kernel holds the running sandbox to (the cgroup's limits from Incus,
    the rest read inside as root: `incus_readback.py`), in the shape `local` reports
    it, and what nothing holds."""
    state = await incus.state(handle.name)
    found, _etag = await incus.instance(handle.name)
    config = found.get("expanded_config") or {}
    if any(d.get("type") == "nic" for d in (found.get("expanded_devices") or {}).values()):
        raise SandboxError(
            f"the container has a network card (profile {profile!r}?): a sandbox gets none"
        )
    code, raw = await incus.run(
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


async def archive_data(
    incus: Incus, handle: IncusSandbox, most: int
) -> tuple[bytes | None, str | None]:
    """The app's data folder as a gzipped tar of at most `most` bytes, or why not."""
    script = (
        "import sys, tarfile\n"
        "with tarfile.open(fileobj=sys.stdout.buffer, mode='w|gz') as tar:\n"
        "    tar.add('/data', arcname='data')\n"
    )
    try:
        code, data = await incus.run(handle.name, [sys.executable, "-I", "-c", script], limit=most)
    except IncusError as exc:
        if exc.status == 413:
            return None, f"the data folder holds more than {most} bytes, the most kept"
        return None, f"the data folder could not be archived: {exc.message}"
    if code != 0:
        return None, f"the data folder could not be archived (exit {code})"
    return data, None
