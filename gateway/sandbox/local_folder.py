"""A local sandbox's folder on the gateway's machine: laid out for its app, removed again,
and what an earlier gateway left below the sandbox dir cleared at start.

The folder holds the checkout (`app`), a tmpfs of the data budget's size at `data` and
another of the /tmp budget's at `tmp`, each owned by the sandbox's user, the app's log,
and its listening unix socket (`app.sock`, in a folder the sandbox never sees, so nothing
the app does can point the gateway's connections elsewhere). Removing it unmounts those
filesystems first (their memory goes with them, whatever they hold), then removes the
folder at any depth without recursion (`tree.py`).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

from gateway.core.sandbox_spec import Budgets, Repository

from . import mounts, tree
from .bubblewrap import DATA_DIR, LISTEN_FD
from .cgroup import CgroupParent
from .checkout import Checkout, extract
from .errors import SandboxError
from .local_sandbox import LocalSandbox

log = logging.getLogger(__name__)

PYTHON = "{python}"
# The variable that names the sandbox to its app; the jail's arguments set it, so they
# also mark the jail's processes (`bubblewrap.jail_marker`).
ID_VARIABLE = "SANDBOX_ID"


def prepare(handle: LocalSandbox, budgets: Budgets, cgroup: CgroupParent | None) -> Checkout:
    """Lay out the handle's folder: its checkout, sized data and /tmp, socket, the app's
    command and environment, and its cgroup when there is a parent for one."""
    handle.folder.mkdir(mode=0o700)
    handle.checkout.mkdir()
    checkout = extract(
        Path(handle.repository.path),
        handle.spec.commit,
        handle.checkout,
        max_bytes=budgets.checkout_bytes,
        max_files=budgets.checkout_files,
    )
    # Sized by the kernel, not metered: what an app holds open after unlinking it, and
    # folders at any depth, count as much as what a walk would see.
    for name, folder, size in (
        ("data", handle.data, budgets.data_bytes),
        ("tmp", handle.tmp, budgets.tmp_bytes),
    ):
        folder.mkdir(mode=0o700)
        try:
            handle.sized[name] = mounts.mount_tmpfs(
                folder, size=size, entries=budgets.data_entries, uid=handle.uid
            )
        except OSError as exc:
            # Never a folder without a size instead: the budget would be a claim.
            raise SandboxError(f"the sandbox's {name} cannot be given its size: {exc}") from None
        handle.mounted.append(folder)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(handle.socket_path))
    listener.listen(128)
    handle.listener = listener
    handle.command = command(handle.repository)
    handle.env = {
        **handle.spec.env,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": DATA_DIR,
        "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own
        "LANG": "C.UTF-8",
        ID_VARIABLE: handle.sandbox_id,
        "SANDBOX_COMMIT": checkout.commit,
        "SANDBOX_ORIGIN": handle.origin,
        "SANDBOX_DATA": DATA_DIR,
        "SANDBOX_LISTEN_FD": str(LISTEN_FD),
    }
    if cgroup is not None:
        handle.cgroup = cgroup.create(handle.sandbox_id, handle.limits)
    return checkout


def command(repository: Repository) -> list[str]:
    """The registered command, `{python}` being the gateway's interpreter."""
    python = sys.executable
    return [python if part == PYTHON else part for part in repository.command]


def read_only(repository: Repository) -> list[str]:
    """The host paths the jail sees read-only."""
    paths = list(repository.read_only)
    if PYTHON in repository.command:
        # The gateway's own interpreter and what is installed for it, read-only.
        paths += [sys.prefix, sys.base_prefix]
    return list(dict.fromkeys(paths))


def remove(handle: LocalSandbox) -> None:
    """Unmount the sandbox's filesystems (their memory goes with them, whatever they
    hold), then remove its folder."""
    while handle.mounted:
        point = handle.mounted.pop()
        try:
            mounts.unmount(point)
        except OSError as exc:
            log.error("sandbox %s: %s", handle.sandbox_id, exc)
    tree.remove(handle.folder)


def clear_root(root: Path) -> None:
    """Make the sandbox dir (owner only), and unmount and remove what sandboxes of an
    earlier gateway left in it; what cannot be is logged, never a reason not to start (the
    folders' names are random: a new sandbox never meets an old one)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    try:
        points = mounts.mounted_below(root)
    except OSError as exc:
        log.error("the mounts below %s could not be read: %s", root, exc)
        points = []
    for point in points:
        try:
            mounts.unmount(point)
        except OSError as exc:
            log.error("a filesystem an earlier sandbox left is still mounted: %s", exc)
    for entry in root.iterdir():
        if entry.name.startswith("sbx-"):
            try:
                tree.remove(entry)
            except OSError as exc:
                log.error("what an earlier sandbox left could not be removed: %s", exc)
