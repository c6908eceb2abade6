"""An Incus daemon for the sandbox tests, benches and `make cluster`, on this machine only.

`scripts/ensure-incus` installs Incus (Debian's `incus-base`); this starts its daemon when
none answers on the socket (there may be no service manager to do it), and stops it again
on the way out if it started it. Containers get no network card, so the daemon needs no
bridge and no image server: the provider makes its pool, profile and image itself.

    with incus_daemon() as socket_path:
        ...   # GATEWAY_SANDBOX_INCUS='{"socket": socket_path, ...}'

What the tests leave (containers of their deployment names, the image) is removed by the
tests themselves; `remove_deployment` deletes any container of one deployment that is left.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from gateway.sandbox.incus_api import DEFAULT_SOCKET

DAEMON = Path("/usr/libexec/incus/incusd")
START_TIMEOUT_S = 30.0
LOG = Path("/var/log/incus/incusd-tests.log")


class IncusUnavailable(RuntimeError):
    """Incus is not installed here, or its daemon does not start."""


def incus_installed() -> bool:
    return DAEMON.is_file() and shutil.which("incus") is not None


def incus_reachable(socket_path: str) -> bool:
    """Whether an Incus answers on this machine's socket."""
    probe_socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe_socket.settimeout(2)
        probe_socket.connect(socket_path)
    except OSError:
        return False
    finally:
        probe_socket.close()
    return True


@contextlib.contextmanager
def incus_daemon(socket_path: str = DEFAULT_SOCKET) -> Iterator[str]:
    """The socket of a running Incus daemon: the one already there, or one started here
    (and stopped when the block ends)."""
    if incus_reachable(socket_path):
        yield socket_path
        return
    if not incus_installed():
        raise IncusUnavailable("Incus is not installed (scripts/ensure-incus installs it)")
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(LOG, "ab") as log:
        process = subprocess.Popen(
            [str(DAEMON), "--group", "root"],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not incus_reachable(socket_path):
            if process.poll() is not None:
                raise IncusUnavailable(f"incusd exited ({process.returncode}); see {LOG}")
            if time.monotonic() > deadline:
                raise IncusUnavailable(f"incusd did not answer within {START_TIMEOUT_S:g} s")
            time.sleep(0.1)
        subprocess.run(
            ["incus", "admin", "waitready", "--timeout", "30"], check=False, capture_output=True
        )
        yield socket_path
    finally:
        # `incus admin shutdown` stops the daemon with its containers, as a service would.
        subprocess.run(
            ["incus", "admin", "shutdown", "--timeout", "30"],
            check=False,
            capture_output=True,
            timeout=60,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
            process.wait()


def remove_deployment(deployment: str, prefix: str = "gw-") -> list[str]:
    """Delete every container of `deployment` (what a test left); their names."""
    done = subprocess.run(
        ["incus", "list", "--format", "json"], check=True, capture_output=True, text=True
    )
    removed = []
    for instance in json.loads(done.stdout):
        name = instance.get("name", "")
        config = instance.get("config") or {}
        if name.startswith(prefix) and config.get("user.gateway.deployment") == deployment:
            subprocess.run(["incus", "delete", "--force", name], check=False, capture_output=True)
            removed.append(name)
    return removed
