"""The processes of the sandboxes' users, read from /proc, and ending them.

A sandbox's processes are those of its uid (real, effective, saved or filesystem), of its
PID namespace, or started with its jail's arguments (a jail still setting up runs as root,
and its namespace may not be known yet); teardown counts what is left of them, and a uid
is used again only once nothing holds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")
# How long the processes of a uid get to go after SIGKILL before the uid counts as held.
KILL_WAIT_S = 5.0


def sandbox_processes(
    uid: int, pid_namespace: int | None, jail_marker: bytes | None = None
) -> list[int]:
    """Processes that belong to a sandbox: of its user, in its PID namespace, or whose
    command line holds `jail_marker` (`bubblewrap.jail_marker`)."""
    return [
        pid for pid, uids in _processes(pid_namespace, jail_marker) if uids is None or uid in uids
    ]


def _processes(
    pid_namespace: int | None = None, jail_marker: bytes | None = None, *, zombies: bool = True
) -> list[tuple[int, set[int] | None]]:
    """Every process with its uids (real, effective, saved, filesystem); None instead for
    one in `pid_namespace` or with `jail_marker` on its command line. Without `zombies`,
    dead ones its parent has not waited for are left out (no signal ends them; only their
    parent can)."""
    found: list[tuple[int, set[int] | None]] = []
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            if pid_namespace is not None and (
                os.stat(PROC / entry / "ns" / "pid").st_ino == pid_namespace
            ):
                found.append((int(entry), None))
                continue
            if jail_marker is not None and jail_marker in (PROC / entry / "cmdline").read_bytes():
                found.append((int(entry), None))
                continue
            status = (PROC / entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("State:") and not zombies and line.split()[1] == "Z":
                break
            if line.startswith("Uid:"):
                found.append((int(entry), {int(u) for u in line.split()[1:]}))
                break
    return found


def reap_uids(uids: range | list[int]) -> list[int]:
    """SIGKILL every process holding one of `uids`; the uids some live process still holds
    after `KILL_WAIT_S` (a killed one its parent has not waited for yet runs nothing)."""
    wanted = set(uids)
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        held: set[int] = set()
        for pid, mine in _processes(zombies=False):
            if mine is not None and mine & wanted:
                held |= mine & wanted
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if not held or time.monotonic() >= deadline:
            return sorted(held)
        time.sleep(0.02)
