"""What a running sandbox is held to, as the kernel reports it, for its manifest.

A limit the gateway asked for is not a limit the kernel holds: a mount option may be
rounded or ignored, a filter may not be installed, a cgroup may not exist. So once the app
is healthy, each is read back from the kernel's side of the running jail (the app's
`/proc/<pid>/status` and `limits`, `statvfs` of its `/data` and `/tmp` through
`/proc/<pid>/root`, its cgroup's files), and the manifest says what was found there, and,
as sentences, what nothing on this host holds.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Protocol

from gateway.core.sandbox_spec import Limits

from . import mounts, seccomp


class Jail(Protocol):
    """What the read-back needs of a running jail (a `LocalSandbox`)."""

    uid: int
    pid_namespace: int | None
    sized: dict[str, mounts.Sized]
    cgroup: Path | None


PROC = Path("/proc")
# The lines of /proc/<pid>/limits the manifest reports, by the name it gives them.
_RLIMITS = {
    "Max address space": "address_space_bytes",
    "Max processes": "processes",
    "Max cpu time": "cpu_s",
    "Max file size": "file_size_bytes",
    "Max open files": "open_files",
    "Max core file size": "core_bytes",
}


def _app_pid(handle: Jail) -> int | None:
    """A process of the app: of the sandbox's user, in its PID namespace (bwrap's own
    init there is root's, without the app's filter)."""
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(PROC / entry / "ns" / "pid").st_ino != handle.pid_namespace:
                continue
            if os.stat(PROC / entry).st_uid == handle.uid:
                return int(entry)
    return None


def _status(pid: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in (PROC / str(pid) / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def _rlimits(pid: int) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for line in (PROC / str(pid) / "limits").read_text().splitlines()[1:]:
        for label, name in _RLIMITS.items():
            if line.startswith(label):
                hard = line[len(label) :].split()[1]  # soft, hard, units
                found[name] = None if hard == "unlimited" else int(hard)
    return found


def _sized(size: mounts.Sized) -> dict[str, Any]:
    return {"by": "tmpfs", "bytes": size.bytes, "entries": size.entries}


def _cgroup(group: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.max"):
        with contextlib.suppress(OSError):
            found[name] = (group / name).read_text().strip()
    return found


def read_back(handle: Jail, limits: Limits) -> tuple[dict[str, Any], list[str]]:
    """What the kernel holds the running sandbox to, and what nothing here holds."""
    enforced: dict[str, Any] = {"refused_calls": [], "rlimits": {}, "cgroup": None}
    not_enforced: list[str] = []
    pid = _app_pid(handle)
    status: dict[str, str] = {}
    if pid is not None:
        with contextlib.suppress(OSError):
            status = _status(pid)
        with contextlib.suppress(OSError):
            enforced["rlimits"] = _rlimits(pid)
    for name in ("data", "tmp"):
        # As the jail sees it when it can be read; else as the mount answered the host.
        size = handle.sized[name]
        if pid is not None:
            with contextlib.suppress(OSError):
                size = mounts.sized(PROC / str(pid) / "root" / name)
        enforced[name] = _sized(size)
    if status.get("Seccomp") == "2":
        enforced["refused_calls"] = sorted(seccomp.REFUSED)
        enforced["user_namespaces"] = "refused"
    else:
        not_enforced.append(
            "no system-call filter was found on the app: it may make user namespaces, "
            "memfds, System V shared memory and message queues, io_uring rings, keys in "
            "its uid's keyrings"
        )
    enforced["no_new_privs"] = status.get("NoNewPrivs") == "1"
    enforced["capabilities"] = "none" if status.get("CapEff", "").strip("0") == "" else "some"
    if handle.cgroup is not None:
        enforced["cgroup"] = _cgroup(handle.cgroup)
    else:
        not_enforced += [
            f"memory_mb ({limits.memory_mb}) bounds each process's address space, not the "
            "sandbox's memory as a whole: with no delegated cgroup, its processes together "
            "may map up to `processes` times as much",
            f"cpu_s ({limits.cpu_s}) bounds each process's CPU time, not the sandbox's",
        ]
    not_enforced.append(
        "kernel memory held by the app's pipes, sockets and other kernel objects is "
        "bounded only through its open files and processes"
        + ("" if handle.cgroup is not None else ", not by memory_mb")
    )
    return enforced, not_enforced
