"""The jail of a local sandbox, as one command line: prlimit, bubblewrap, setpriv, the app.

- `prlimit` sets the resource limits first, so every process of the sandbox inherits
  them: address space (`memory_mb`), CPU seconds and file size per process, open files,
  no core dumps, and processes (`RLIMIT_NPROC`, counted per user: each sandbox runs as a
  user of its own, so the count is the sandbox's alone).
- `bwrap` (bubblewrap, started by root) makes new mount, PID, network, IPC and UTS
  namespaces. The network namespace has only its own loopback: no route, no name server,
  and nobody else's loopback ports. The mount namespace holds the system's programs and
  libraries read-only (`/usr` and its links), the few `/etc` files a program needs to
  start, any runtime the repository's registration names (read-only), the checkout at
  `/app` (read-only), the data folder at `/data` and a `/tmp` of its own (writable: each
  a tmpfs of a fixed size the gateway mounted, `mounts.py`), `/proc` of its own PID
  namespace and a minimal `/dev`. Nothing else of the host: not the gateway's
  data folder, its keys, other sandboxes, or the user's home. The environment is cleared
  and only the listed variables are set. `--die-with-parent` ends the sandbox if the
  gateway dies.
- `setpriv` gives root up for the sandbox's own user inside, with no capabilities (also
  none in the bounding set), no supplementary groups and `no_new_privs`.
- A seccomp filter (`gateway/sandbox/seccomp.py`), installed by bwrap, refuses the app
  new user namespaces, the one kind an unprivileged process could still make, and the
  kernel interfaces it has no need for.

The app receives its listening unix socket as standard input (fd 0, as inetd and
systemd's socket activation hand it); its standard output and error go to a log file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.core.sandbox_spec import Limits

MIB = 1024 * 1024
# Where the sandbox sees its checkout and its data.
APP_DIR = "/app"
DATA_DIR = "/data"
LISTEN_FD = 0
# Top-level links of a merged-/usr system (kept as links) or folders (bound read-only).
_SYSTEM_TOP = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What a dynamically linked program needs of /etc, and nothing that says who is on the host.
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/ssl/certs",
)


def find_tools() -> dict[str, str | None]:
    """The programs the jail is made of; None where one is missing."""
    return {name: shutil.which(name) for name in ("bwrap", "prlimit", "setpriv")}


@dataclass(frozen=True)
class JailPlan:
    checkout: Path
    data: Path
    uid: int
    gid: int
    limits: Limits
    env: Mapping[str, str]
    command: Sequence[str]
    tmp: Path  # the host folder bound as /tmp (a sized tmpfs the gateway mounted)
    read_only: Sequence[str] = ()  # host paths visible read-only at the same place
    hostname: str = "sandbox"
    info_fd: int | None = None  # where bwrap reports the pid of the sandbox's init
    # A seccomp program (gateway/sandbox/seccomp.py) bwrap installs before the app starts.
    seccomp_fd: int | None = None


def limit_args(limits: Limits) -> list[str]:
    """`prlimit` options for the limits (each soft and hard alike)."""
    args = ["--core=0"]
    if limits.memory_mb is not None:
        args.append(f"--as={limits.memory_mb * MIB}")
    if limits.processes is not None:
        args.append(f"--nproc={limits.processes}")
    if limits.cpu_s is not None:
        # The soft limit sends SIGXCPU; one second later the hard one kills.
        args.append(f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}")
    if limits.file_size_mb is not None:
        args.append(f"--fsize={limits.file_size_mb * MIB}")
    if limits.open_files is not None:
        args.append(f"--nofile={limits.open_files}")
    return args


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in _SYSTEM_TOP:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in _ETC:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def setenv(name: str, value: str) -> list[str]:
    """The jail's arguments that set one variable of the sandbox's environment."""
    return ["--setenv", name, value]


def jail_marker(name: str, value: str) -> bytes:
    """What `/proc/<pid>/cmdline` of a jail whose environment sets `name` to `value` holds
    (its arguments, each ended by a NUL): a process started with those arguments is that
    jail's, whatever user it runs as and whichever PID namespace it is in."""
    return b"".join(arg.encode() + b"\0" for arg in setenv(name, value))


def command_line(plan: JailPlan) -> list[str]:
    """The whole argv: limits, namespaces and mounts, the user, then the app's command."""
    argv = ["prlimit", *limit_args(plan.limits), "--", "bwrap"]
    argv += [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        plan.hostname,
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    argv += _system_mounts()
    # The sandbox's own /tmp, nothing of the host's: a tmpfs of a fixed size and number of
    # files (the memory it takes is counted by no resource limit). Mounted before the
    # runtime's paths, which may lie under the host's /tmp (a checkout there).
    argv += ["--bind", str(plan.tmp), "/tmp"]  # noqa: S108
    made: set[str] = {"/tmp"}  # noqa: S108 - mounted above, with its own mode
    for path in plan.read_only:
        if not os.path.exists(path):
            continue
        # The folders above a bound path are made here, searchable: left to bwrap they
        # copy the host's mode, and a runtime under a 0700 /root would be unreachable.
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--dir", "/run"]
    argv += ["--ro-bind", str(plan.checkout), APP_DIR, "--bind", str(plan.data), DATA_DIR]
    argv += ["--chdir", APP_DIR]
    for name, value in sorted(plan.env.items()):
        argv += setenv(name, value)
    if plan.info_fd is not None:
        argv += ["--info-fd", str(plan.info_fd)]
    if plan.seccomp_fd is not None:
        argv += ["--seccomp", str(plan.seccomp_fd)]
    argv += [
        "--",
        "setpriv",
        f"--reuid={plan.uid}",
        f"--regid={plan.gid}",
        "--clear-groups",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--no-new-privs",
        "--",
        *plan.command,
    ]
    return argv
