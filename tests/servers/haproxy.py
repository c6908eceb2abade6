"""HAProxy in front of a cluster's gateways: its configuration, and a process to run it.

`render_config` writes the configuration the cluster tests, `make cluster` and
docs/deploy.md use (the doc's copy is checked against it by tests/cluster). The front is
HTTP, lets websockets through (a long tunnel timeout once upgraded), checks each node's
`GET /healthz` every 500 ms so a node that died leaves the rotation within about a second,
and picks a node by a consistent hash of the request's task id hint: the `Gateway-Task`
header on a request with a bearer token, else the `task` query parameter of a tab channel
(`/v1/tabs?task=...`), else round robin. The hint is only locality: any node can serve any
task, so a node leaving moves only its own share. A hint steers no more than
`hints_per_10s` requests of one client (source address) in 10 s; past that its requests go
round robin, so no client, with a token or a made-up one, can pile its load on one node.

    config = render_config(front_port=8080, backends=[Backend("node-1", 8101), ...])
    with haproxy(config, workdir) as front:
        front.server_states()    # {"node-1": "UP", ...}
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.servers.subprocesses import end, spawn

HOST = "127.0.0.1"
BACKEND = "gateways"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# The header and query parameter that carry a request's task id hint.
TASK_HEADER = "Gateway-Task"
TASK_PARAM = "task"
# How many requests of one client a hint may steer in 10 s: a few each second per task an
# agent on that address drives, before its requests lose their locality (not their answer).
HINTS_PER_10S = 300


class HAProxyUnavailable(RuntimeError):
    """No haproxy binary on this machine."""


class HAProxyConfigError(RuntimeError):
    """`haproxy -c` refused a configuration; the message is its output."""


def find_haproxy() -> Path:
    """`GATEWAY_HAPROXY`, else Debian's /usr/sbin/haproxy, else one on PATH."""
    configured = os.environ.get("GATEWAY_HAPROXY")
    candidates = [configured] if configured else []
    candidates += ["/usr/sbin/haproxy", shutil.which("haproxy") or ""]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise HAProxyUnavailable(
        "no haproxy found: apt-get install haproxy (scripts/ensure-cluster) or set GATEWAY_HAPROXY"
    )


@dataclass(frozen=True)
class Backend:
    """One gateway node behind the front: its name (the node id) and loopback port."""

    name: str
    port: int
    host: str = HOST


def render_config(
    *,
    front_port: int,
    backends: Sequence[Backend],
    front_host: str = HOST,
    check_host: str | None = None,
    stats_socket: Path | None = None,
    hints_per_10s: int = HINTS_PER_10S,
) -> str:
    """The configuration text. `check_host` is the Host header of the health checks: a
    name every node answers (default: the front's `host:port`, which the nodes know as their
    public URL); `stats_socket` is where the runtime API listens (server states);
    `hints_per_10s`, the requests of one client a task id hint steers in 10 s."""
    check_host = check_host or f"{front_host}:{front_port}"
    stats = ""
    if stats_socket is not None:
        stats = f"    stats socket {stats_socket} mode 600 level admin\n"
    servers = "".join(f"    server {b.name} {b.host}:{b.port}\n" for b in backends)
    return f"""\
global
    # The log goes to standard output, which the harness sends to a file (haproxy -db).
    log stdout format raw local0
{stats}\
defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    # A request's head must arrive within 10 s of the connection.
    timeout http-request 10s
    # Tool calls wait on browsers and approvals: the idle limits are generous.
    timeout client 5m
    timeout server 5m
    # Tab channels and browser websockets stay open for a task's life once upgraded.
    timeout tunnel 1h
    timeout http-keep-alive 30s
    timeout check 1s

frontend gateway
    bind {front_host}:{front_port}
    default_backend {BACKEND}

# Per client (source address): how many requests a task id hint steered in the last 10 s.
backend hints
    stick-table type ip size 100k expire 30s store http_req_rate(10s)

backend {BACKEND}
    # The task id hint: the `{TASK_PARAM}` query parameter of a tab channel (its token comes
    # in its first frame), or the {TASK_HEADER} header of a request that carries a bearer
    # token (set last: it wins). Anything else has no hint: the hash has no data and HAProxy
    # falls back to round robin, so a hint on a request that cannot be a task's steers
    # nothing.
    acl bearer req.hdr(authorization) -m beg -i "bearer "
    acl tab_channel path /v1/tabs
    http-request set-var(txn.task) url_param({TASK_PARAM}) if tab_channel
    http-request set-var(txn.task) req.hdr({TASK_HEADER}) if bearer
    # A client's hints steer {hints_per_10s} requests in 10 s; past that its requests go round
    # robin like any other, so no client can pile its load on one node (tokens made up or not).
    http-request track-sc1 src table hints if {{ var(txn.task) -m found }}
    http-request unset-var(txn.task) if {{ sc_http_req_rate(1,hints) gt {hints_per_10s} }}
    balance hash var(txn.task)
    # Consistent: a node leaving or joining moves only the tasks it held or takes.
    hash-type consistent sdbm avalanche
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host {check_host}
    http-check expect status 200
    # A connection refused by a node that just died is retried on another node.
    retries 2
    option redispatch 1
    # Checked every 500 ms: two failures take a node out, two successes bring it back.
    default-server check inter 500ms fall 2 rise 2
{servers}"""


def check_config(path: Path, binary: Path | None = None) -> None:
    """Run `haproxy -c -f path`; raise HAProxyConfigError with its output if refused."""
    done = subprocess.run(
        [str(binary or find_haproxy()), "-c", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise HAProxyConfigError(f"haproxy -c -f {path}:\n{done.stdout}{done.stderr}")


class HAProxy:
    """One haproxy process in the foreground (`-db`) on a configuration file."""

    def __init__(
        self,
        config_path: Path,
        log_path: Path,
        *,
        stats_socket: Path | None = None,
        env: Mapping[str, str] | None = None,
        binary: Path | None = None,
    ) -> None:
        self.config_path = config_path
        self.log_path = log_path
        self.stats_socket = stats_socket
        self.binary = binary or find_haproxy()
        self._env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Check the configuration, start haproxy, and return once its runtime API answers
        (or, without a stats socket, once the process has stayed up a moment)."""
        if self.running:
            raise RuntimeError("haproxy is already running")
        check_config(self.config_path, self.binary)
        argv = [str(self.binary), "-db", "-f", str(self.config_path)]
        self._process = spawn(argv, self.log_path, self._env)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        """Hard stop (SIGTERM): open tunnels are closed rather than waited for."""
        self._signal_and_wait(signal.SIGTERM)

    def kill(self) -> None:
        self._signal_and_wait(signal.SIGKILL)

    def runtime(self, command: str) -> str:
        """One command on the runtime API (the stats socket); its answer."""
        if self.stats_socket is None:
            raise RuntimeError("this haproxy has no stats socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(self.stats_socket))
            conn.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_states(self) -> dict[str, str]:
        """Each server's state as HAProxy sees it: `UP`, `DOWN`, `UP 1/2` (going down)..."""
        lines = self.runtime("show stat").splitlines()
        if not lines or not lines[0].startswith("# "):
            raise RuntimeError(f"unexpected answer to show stat: {lines[:1]}")
        columns = lines[0][2:].split(",")
        states: dict[str, str] = {}
        for line in lines[1:]:
            row = dict(zip(columns, line.split(","), strict=False))
            if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", None):
                states[row["svname"]] = row.get("status", "")
        return states

    def wait_for_state(self, server: str, up: bool, timeout_s: float = 30.0) -> None:
        """Return once HAProxy counts `server` in the rotation, its checks passing (`up`),
        or has taken it out."""
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.server_states().get(server, "")
            # In: "UP", a check passed since the last failure ("UP 1/2" is in the rotation
            # but going down). Out: "DOWN", or "DOWN 1/2" (going up, still out).
            if (state == "UP") if up else state.startswith("DOWN"):
                return
            time.sleep(0.05)
        want = "up" if up else "down"
        raise TimeoutError(f"{server} is not {want} in haproxy after {timeout_s}s ({state})")

    def _signal_and_wait(self, sig: signal.Signals) -> None:
        if self._process is not None:
            end(self._process, sig, STOP_TIMEOUT_S)
        self._process = None

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise RuntimeError(f"haproxy exited at start (its log: {self.log_path})")
            if self.stats_socket is None:
                time.sleep(0.2)
                if process.poll() is None:
                    return
                continue
            with contextlib.suppress(OSError):
                self.server_states()
                return
            time.sleep(0.05)
        raise RuntimeError(f"haproxy did not start in {timeout_s}s (its log: {self.log_path})")


@contextlib.contextmanager
def haproxy(
    config: str,
    workdir: Path,
    *,
    stats_socket: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[HAProxy]:
    """Write `config` to `workdir/haproxy.cfg` and run haproxy on it for the block; its log
    is `workdir/haproxy.log`. Pass the `stats_socket` the config was rendered with."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "haproxy.cfg"
    config_path.write_text(config)
    front = HAProxy(config_path, workdir / "haproxy.log", stats_socket=stats_socket, env=env)
    front.start()
    try:
        yield front
    finally:
        front.stop()
