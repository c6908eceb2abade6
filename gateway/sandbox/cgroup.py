"""A cgroup v2 group per sandbox, where the host delegated a hierarchy to the gateway.

Resource limits (`bubblewrap.limit_args`) bound each process of a sandbox; a cgroup bounds
the sandbox as a whole (memory, processes, CPU). It is used only when
`GATEWAY_SANDBOX_CGROUP` names a cgroup v2 folder the gateway may write, whose
`cgroup.subtree_control` enables the `memory` and `pids` controllers (`cpu` when there):
a delegated subtree, as systemd's `Delegate=yes` gives a service. Nothing is guessed: a
host with a v1 or hybrid hierarchy, or no delegation, keeps the resource limits alone.

The sandbox enters its group before it starts anything: the command line begins with a
shell that writes its own pid to `cgroup.procs` and then becomes the jail.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.core.sandbox_spec import Limits

log = logging.getLogger(__name__)
MIB = 1024 * 1024
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupParent:
    path: Path
    controllers: frozenset[str]

    @classmethod
    def delegated(cls, path: str | None) -> CgroupParent | None:
        """The parent group for sandboxes, or None when `path` is unset or not usable."""
        if not path:
            return None
        root = Path(path)
        try:
            enabled = frozenset((root / "cgroup.subtree_control").read_text().split())
        except OSError as exc:
            log.warning("sandbox cgroup %s is not a cgroup v2 folder: %s", root, exc)
            return None
        if not {"memory", "pids"} <= enabled or not os.access(root, os.W_OK):
            log.warning(
                "sandbox cgroup %s does not delegate memory and pids (has %s); using "
                "resource limits only",
                root,
                " ".join(sorted(enabled)) or "none",
            )
            return None
        return cls(root, enabled)

    def create(self, name: str, limits: Limits) -> Path:
        group = self.path / name
        group.mkdir()
        if limits.memory_mb is not None:
            (group / "memory.max").write_text(str(limits.memory_mb * MIB))
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
        if limits.processes is not None:
            (group / "pids.max").write_text(str(limits.processes))
        if "cpu" in self.controllers:
            # One core at most, whatever the number of processes.
            (group / "cpu.max").write_text(f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
        return group

    @staticmethod
    def enter_prefix(group: Path) -> list[str]:
        """argv that moves itself into `group`, then runs the rest (`exec "$@"`)."""
        procs = str(group / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs]

    @staticmethod
    def remove(group: Path) -> None:
        with contextlib.suppress(OSError):
            (group / "cgroup.kill").write_text("1")
        with contextlib.suppress(OSError):
            group.rmdir()
