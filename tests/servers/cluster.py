"""A whole gateway cluster on loopback: PostgreSQL, NATS, an S3 server, N gateway nodes
and HAProxy in front, started and stopped as one thing.

For the cluster tests, the benches and a person trying it (`make cluster`, which runs this
module). Each node is `gateway serve` in a process of its own, with its own port, data dir
and log, and the same keys, database, bucket and NATS server as the others; HAProxy's
front is the cluster's public URL. A test can kill, freeze, thaw and restart a node, and
restart NATS on the same port.

    with LocalCluster(nodes=3, workdir=tmp_path) as cluster:
        httpx.get(f"{cluster.front_url}/healthz")
        cluster.kill("node-2")
        cluster.wait_out_of_rotation("node-2")

Every process the cluster starts carries a marker in its environment, and so do the
processes those start (a node's Chromium): `leftover_processes()` finds them in /proc, a
killed node takes its whole tree with it, and `close()` leaves none running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import nats
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from gateway.cluster.subjects import ERRANDS, INBOX
from gateway.core.private_files import write_private
from gateway.core.tokens import new_key
from gateway.serving import free_port
from tests.servers import postgres as pg
from tests.servers.haproxy import Backend, HAProxy, haproxy, render_config
from tests.servers.incus import incus_daemon, incus_installed, remove_deployment
from tests.servers.nats import NatsServer, NatsUser, nats_server, node_user
from tests.servers.s3 import dummy_aws_env, make_bucket, moto_server

HOST = "127.0.0.1"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
# In the environment of every process of a cluster (and inherited by what they start).
MARKER = "GATEWAY_TESTING_CLUSTER_RUN"
# The node's id, in its environment as a setting: what tells one node's processes apart.
MARKER_NODE = "GATEWAY_NODE_ID"
# The NATS user the harness itself connects as (to see the nodes on the bus; the benches'
# floor): it may ask a node's errand subject, which a node refuses, and echo on `bench.>`.
HARNESS = "harness"
HARNESS_INBOX = INBOX.format(node=HARNESS)
# What a node takes from the environment of the process starting it: how to find programs,
# Python packages and a browser, and nothing else (no AWS_*, no GATEWAY_* of the runner's).
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "PLAYWRIGHT_BROWSERS_PATH")


@dataclass
class Node:
    """One gateway process of the cluster."""

    id: str
    port: int
    data_dir: Path
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        process = self.process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        """The process exists (a node stopped with SIGSTOP is still running)."""
        return self.pid is not None


@dataclass(frozen=True)
class ExampleUrls:
    """Where the example app runs, beside the node that serves it."""

    node: str
    dashboard: str
    sandbox: str


class LocalCluster:
    """A cluster of `nodes` gateways and what they share, for a `with` block."""

    def __init__(
        self,
        nodes: int = 3,
        *,
        workdir: Path | None = None,
        postgres: pg.Cluster | None = None,
        s3_endpoint: str | None = None,
        example: bool = False,
        launch_browser: bool = False,
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        """`workdir` holds the data dirs, logs and HAProxy's config (default: a temporary
        directory removed on close). `postgres` and `s3_endpoint` reuse servers already
        running (a test session's); otherwise the cluster starts its own. `example` serves
        the example app beside node-1. `env` adds variables to every node's environment."""
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.size = nodes
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gateway-cluster-"))
        self.logs_dir = self.workdir / "logs"
        self._postgres = postgres
        self._given_s3 = s3_endpoint
        self._example = example
        self._launch_browser = launch_browser
        self._extra_env = dict(env or {})
        self._start_timeout_s = start_timeout_s
        self.run_id = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.secret_keys = [new_key()]
        self.control_key = new_key()
        self.nodes: list[Node] = []
        self.front_url = ""
        self.database_url = ""
        self.s3_endpoint = ""
        self.bucket = ""
        self.example_urls: ExampleUrls | None = None
        self._nats: NatsServer | None = None
        self.harness_user = NatsUser(
            HARNESS,
            secrets.token_urlsafe(24),
            {
                "publish": {"allow": [ERRANDS.format(node="*"), "bench.>"]},
                "subscribe": {"allow": [f"{HARNESS_INBOX}.>", "bench.>"]},
                "allow_responses": True,
            },
        )
        self._haproxy: HAProxy | None = None
        self._pg_home: Path | None = None
        self._stack = contextlib.ExitStack()

    # -- the whole cluster ----------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def nats(self) -> NatsServer:
        assert self._nats is not None, "the cluster is not started"
        return self._nats

    @property
    def haproxy(self) -> HAProxy:
        assert self._haproxy is not None, "the cluster is not started"
        return self._haproxy

    @property
    def artifacts_url(self) -> str:
        return f"s3://{self.bucket}/artifacts"

    def start(self) -> None:
        """Start everything, in order; return once every node and the front answer
        /healthz and HAProxy counts every node in. A failure stops what had started."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop everything in reverse order, then end any process of the cluster still left
        (a node's Chromium orphaned by a kill), and remove a temporary workdir."""
        try:
            self._stack.close()
        finally:
            self._sweep()
            self._nats = None
            self._haproxy = None
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        base = self._base_env()
        enter = self._stack.enter_context

        postgres = self._postgres
        if postgres is None:
            postgres = enter(pg.throwaway_cluster())
            self._pg_home = postgres.home
        self.database_url = postgres.new_database()

        node_ids = [f"node-{index}" for index in range(1, self.size + 1)]
        node_users = {node_id: node_user(node_id) for node_id in node_ids}
        self._nats = enter(
            nats_server(
                self.logs_dir / "nats.log",
                users=[*node_users.values(), self.harness_user],
                env=base,
            )
        )

        if self._given_s3 is None:
            self.s3_endpoint = enter(moto_server(self.logs_dir / "s3.log", env=base))
        else:
            self.s3_endpoint = self._given_s3
        self.bucket = make_bucket(self.s3_endpoint)

        ports = _distinct_free_ports(self.size + 1)
        front_port = ports[0]
        self.front_url = f"http://{HOST}:{front_port}"
        shared = self._shared_node_env(base)
        for node_id, port in zip(node_ids, ports[1:], strict=True):
            data_dir = self.workdir / "nodes" / node_id
            env = {
                **shared,
                "GATEWAY_NODE_ID": node_id,
                "GATEWAY_NATS_USER": node_id,
                "GATEWAY_NATS_PASSWORD": node_users[node_id].password,
                "GATEWAY_PORT": str(port),
                "GATEWAY_DATA_DIR": str(data_dir),
                "GATEWAY_EXAMPLE": "false",
            }
            self.nodes.append(Node(node_id, port, data_dir, self.logs_dir / f"{node_id}.log", env))
        if self._example:
            self._place_example(shared_env=shared)
        self._stack.callback(self._stop_nodes)
        for node in self.nodes:
            self._spawn(node)
        deadline = time.monotonic() + self._start_timeout_s
        for node in self.nodes:
            self._wait_healthy(node, deadline)

        # A short path of its own: a unix socket's path has a limit of about 100 bytes.
        socket_dir = Path(tempfile.mkdtemp(prefix="gw-haproxy-"))
        self._stack.callback(shutil.rmtree, socket_dir, ignore_errors=True)
        stats_socket = socket_dir / "stats.sock"
        config = render_config(
            front_port=front_port,
            backends=[Backend(node.id, node.port) for node in self.nodes],
            stats_socket=stats_socket,
        )
        self._haproxy = enter(
            haproxy(config, self.workdir / "haproxy", stats_socket=stats_socket, env=base)
        )
        for node in self.nodes:
            self.wait_in_rotation(node, timeout_s=max(deadline - time.monotonic(), 5.0))
        _wait_for_health(self.front_url, None, deadline, "the front")

    def _base_env(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in INHERITED if name in os.environ}
        env.setdefault("PATH", os.defpath)
        env[MARKER] = self.run_id
        return env

    def _shared_node_env(self, base: dict[str, str]) -> dict[str, str]:
        assert self._nats is not None
        return {
            **base,
            **dummy_aws_env(self.workdir),
            # Each log line as it is written: the logs are read while the nodes run.
            "PYTHONUNBUFFERED": "1",
            "GATEWAY_HOST": HOST,
            "GATEWAY_PUBLIC_URL": self.front_url,
            "GATEWAY_DATABASE_URL": self.database_url,
            "GATEWAY_ARTIFACTS_URL": self.artifacts_url,
            "GATEWAY_ARTIFACTS_ENDPOINT_URL": self.s3_endpoint,
            "GATEWAY_NATS_URL": self._nats.url,
            "GATEWAY_SECRET_KEYS": ",".join(self.secret_keys),
            "GATEWAY_CONTROL_KEY": self.control_key,
            "GATEWAY_BROWSER_LAUNCH_AT_START": "true" if self._launch_browser else "false",
            **self._extra_env,
        }

    def _place_example(self, shared_env: dict[str, str]) -> None:
        """The example app beside node-1: the dashboard on a port whose next one is free for
        the sandbox instance (serve.py puts it there); its origin allowed on every node, as
        its pages' tab channels may reach any of them through the front."""
        taken = {node.port for node in self.nodes}
        for _ in range(50):
            port = free_port(HOST)
            if port not in taken and port + 1 not in taken and _port_free(port + 1):
                break
        else:
            raise RuntimeError("found no two free ports in a row for the example app")
        dashboard = f"http://{HOST}:{port}"
        self.example_urls = ExampleUrls(self.nodes[0].id, dashboard, f"http://{HOST}:{port + 1}")
        origins = [dashboard, dashboard.replace(f"//{HOST}:", "//localhost:")]
        given = [o for o in shared_env.get("GATEWAY_DASHBOARD_ORIGINS", "").split(",") if o]
        for node in self.nodes:
            node.env["GATEWAY_DASHBOARD_ORIGINS"] = ",".join([*given, *origins])
        first = self.nodes[0]
        first.env["GATEWAY_EXAMPLE"] = "true"
        first.env["GATEWAY_EXAMPLE_PORT"] = str(port)

    # -- one node ---------------------------------------------------------------------------

    def node(self, which: Node | str) -> Node:
        if isinstance(which, Node):
            return which
        for node in self.nodes:
            if node.id == which:
                return node
        raise KeyError(f"no node {which!r} in this cluster ({[n.id for n in self.nodes]})")

    def kill(self, which: Node | str) -> None:
        """SIGKILL the node and everything it started, as a crashed machine would."""
        node = self.node(which)
        self._signal_tree(node, signal.SIGKILL)
        self._reap(node)
        # A child being started at the moment of the first sweep is caught by a later one.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.node_processes(node) and time.monotonic() < deadline:
            self._signal_tree(node, signal.SIGKILL)
            time.sleep(0.02)

    def stop(self, which: Node | str) -> None:
        """Freeze the node and everything it started (SIGSTOP): its connections stay open and
        nothing answers, as a machine that hangs."""
        self._signal_tree(self.node(which), signal.SIGSTOP)

    def cont(self, which: Node | str) -> None:
        """Thaw a node frozen by `stop` (SIGCONT)."""
        self._signal_tree(self.node(which), signal.SIGCONT)

    def restart(self, which: Node | str, *, graceful: bool = True) -> None:
        """Stop the node (SIGTERM, then SIGKILL if it lingers; `graceful=False`: SIGKILL at
        once) and start it again on the same port and data dir; return once it answers
        /healthz and HAProxy counts it in again."""
        node = self.node(which)
        if graceful:
            self._terminate(node)
        else:
            self.kill(node)
        self._spawn(node)
        deadline = time.monotonic() + self._start_timeout_s
        self._wait_healthy(node, deadline)
        if self._haproxy is not None:
            self.wait_in_rotation(node, timeout_s=max(deadline - time.monotonic(), 5.0))

    def restart_nats(self) -> None:
        """Stop NATS and start it again on the same port (clients reconnect to it)."""
        self.nats.stop()
        self.nats.start()

    async def bus_client(self) -> Client:
        """A NATS client as the harness's user (close it when done)."""
        return await nats.connect(
            self.nats.url,
            name="cluster harness",
            inbox_prefix=HARNESS_INBOX,
            **self.harness_user.credentials,
        )

    async def wait_on_bus(self, timeout_s: float = 30.0) -> None:
        """Return once every running node answers on its own subject of the bus (after a
        NATS restart, each node's client reconnects and subscribes again). Asked with an
        empty envelope, which a node refuses, sealed: an answer is all this waits for."""
        client = await self.bus_client()
        try:
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                while node.running:
                    try:
                        await client.request(ERRANDS.format(node=node.id), b"", timeout=1)
                        break
                    except (NoRespondersError, NatsTimeout):
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"{node.id} is not on the bus") from None
                        await asyncio.sleep(0.05)
        finally:
            await client.close()

    def wait_in_rotation(self, which: Node | str, timeout_s: float = 30.0) -> None:
        """Return once HAProxy sends requests to the node again."""
        self.haproxy.wait_for_state(self.node(which).id, up=True, timeout_s=timeout_s)

    def wait_out_of_rotation(self, which: Node | str, timeout_s: float = 30.0) -> None:
        """Return once HAProxy has taken the node out (its health checks failed)."""
        self.haproxy.wait_for_state(self.node(which).id, up=False, timeout_s=timeout_s)

    def node_processes(self, which: Node | str) -> list[int]:
        """The node's process and every process it started, still alive."""
        node = self.node(which)
        marked = _marked_processes(self.run_id)
        return [pid for pid, env in marked if env.get(MARKER_NODE) == node.id]

    def leftover_processes(self) -> list[tuple[int, str]]:
        """Every process of this cluster still alive (pid, command line): none after close."""
        found = {pid: _cmdline(pid) for pid, _env in _marked_processes(self.run_id)}
        if self._pg_home is not None:
            # PostgreSQL is started by tests.servers.postgres with the environment of the
            # process starting it: its processes are known by the directory they run in (the
            # server changes into its data directory, and its children inherit that).
            home = str(self._pg_home)
            for pid in _pids():
                if _cwd(pid).startswith(home):
                    found[pid] = _cmdline(pid)
        found.pop(os.getpid(), None)
        return sorted(found.items())

    def _spawn(self, node: Node) -> None:
        if node.running:
            raise RuntimeError(f"{node.id} is already running")
        node.data_dir.mkdir(parents=True, exist_ok=True)
        with node.log_path.open("ab") as log:
            log.write(f"== LocalCluster: starting {node.id} on {node.url}\n".encode())
            log.flush()
            node.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=node.env,
                cwd=node.data_dir,
                # Its own session: a Ctrl-C in the terminal reaches the harness, which stops
                # the nodes in order, not every process at once.
                start_new_session=True,
            )

    def _wait_healthy(self, node: Node, deadline: float) -> None:
        _wait_for_health(node.url, node, deadline, node.id)

    def _terminate(self, node: Node) -> None:
        process = node.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            # A frozen node would not see its SIGTERM until thawed.
            self._signal_tree(node, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)
        # Whatever it started and did not end (or all of it, if it would not stop).
        self._signal_tree(node, signal.SIGKILL)
        self._reap(node)

    def _reap(self, node: Node) -> None:
        if node.process is not None:
            node.process.wait()
            node.process = None

    def _stop_nodes(self) -> None:
        for node in reversed(self.nodes):
            self._terminate(node)

    def _signal_tree(self, node: Node, sig: signal.Signals) -> None:
        pids = set(self.node_processes(node))
        if node.pid is not None:
            pids.add(node.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _sweep(self) -> None:
        """End what is left of the cluster: processes that outlived their node."""
        for node in self.nodes:
            self._reap_quietly(node)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            left = [pid for pid, _ in _marked_processes(self.run_id) if pid != os.getpid()]
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def _reap_quietly(self, node: Node) -> None:
        process = node.process
        if process is not None:
            if process.poll() is None:
                self._signal_tree(node, signal.SIGKILL)
            process.wait()
            node.process = None


def _wait_for_health(url: str, node: Node | None, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        if node is not None and (node.process is None or node.process.poll() is not None):
            raise RuntimeError(f"{what} exited at start:\n{_tail(node.log_path)}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    log = f":\n{_tail(node.log_path)}" if node is not None else ""
    raise RuntimeError(f"{what} did not answer {url}/healthz in time{log}")


def _tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return f"(no log at {path})"


def _pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _marked_processes(run_id: str) -> list[tuple[int, dict[str, str]]]:
    """Live processes whose environment carries this run's marker (a zombie's environment
    reads empty, so the dead are not counted)."""
    found = []
    for pid in _pids():
        env = _environ(pid)
        if env is not None and env.get(MARKER) == run_id:
            found.append((pid, env))
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(HOST)
        if port not in ports:
            ports.append(port)
    return ports


# -- make cluster ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.servers.cluster",
        description="Run a gateway cluster on loopback until Ctrl-C: PostgreSQL, NATS, an S3 "
        "server, N gateways and HAProxy in front.",
    )
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument(
        "--no-example", action="store_true", help="do not serve the example app beside node-1"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the data dirs and logs after stopping"
    )
    parser.add_argument(
        "--no-incus",
        action="store_true",
        help="no sandboxes on Incus (the example's tasks then share one instance)",
    )
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-cluster-"))
    print(f"cluster: starting in {workdir} (logs in {workdir / 'logs'})", flush=True)
    try:
        with contextlib.ExitStack() as stack:
            env: dict[str, str] = {}
            if not args.no_incus and incus_installed():
                # Every node provisions on the one Incus: a task keeps its sandbox when it
                # moves between nodes.
                socket_path = stack.enter_context(incus_daemon())
                deployment = f"cluster-{secrets.token_hex(4)}"
                env["GATEWAY_SANDBOX_INCUS"] = json.dumps(
                    {"socket": socket_path, "deployment": deployment}
                )
                stack.callback(remove_deployment, deployment)
                if not args.no_example:
                    # Registered on every node: the node a task moves to restarts its app.
                    from examples.synthetic_app.serve import REPOSITORY, example_repository

                    env["GATEWAY_SANDBOX_REPOSITORIES"] = json.dumps(
                        {REPOSITORY: example_repository().model_dump()}
                    )
            cluster = LocalCluster(
                args.nodes,
                workdir=workdir,
                example=not args.no_example,
                launch_browser=False,
                env=env,
            )
            with cluster:
                _print_urls(cluster, incus="GATEWAY_SANDBOX_INCUS" in env)
                _wait_for_signal(cluster)
                print("cluster: stopping", flush=True)
    except KeyboardInterrupt:
        print("cluster: stopped while starting", flush=True)
    finally:
        if args.keep:
            print(f"cluster: logs and data kept in {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _print_urls(cluster: LocalCluster, *, incus: bool) -> None:
    key_file = cluster.workdir / "control.key"
    write_private(key_file, (cluster.control_key + "\n").encode())
    lines = [
        f"cluster: front (HAProxy) {cluster.front_url}",
        *(f"cluster: {n.id} {n.url} (log {n.log_path})" for n in cluster.nodes),
        f"cluster: NATS {cluster.nats.url} (a user per node; each node's password is in "
        f"its environment, the server's configuration in {cluster.nats.config_path})",
        f"cluster: S3 {cluster.s3_endpoint} (artifacts in {cluster.artifacts_url})",
        f"cluster: database {cluster.database_url}",
        f"cluster: control key in {key_file} (mode 0600)",
    ]
    if cluster.example_urls is not None:
        example = cluster.example_urls
        lines.append(f"cluster: example dashboard {example.dashboard}/ (beside {example.node})")
        if incus:
            lines.append("cluster: each example task gets a sandbox of its own on Incus")
        else:
            # Without Incus a node of a cluster provisions none: the tasks share one.
            lines.append(f"cluster: example sandbox instance {example.sandbox}/")
    lines.append("cluster: Ctrl-C stops everything")
    print("\n".join(lines), flush=True)


def _wait_for_signal(cluster: LocalCluster) -> None:
    """Until Ctrl-C or SIGTERM; a node that exits on its own is reported, not restarted."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        reported: set[str] = set()
        while not stop.wait(1.0):
            for node in cluster.nodes:
                process = node.process
                if process is not None and process.poll() is not None and node.id not in reported:
                    reported.add(node.id)
                    print(
                        f"cluster: {node.id} exited ({process.returncode}); see {node.log_path}",
                        flush=True,
                    )
    finally:
        # A second Ctrl-C while stopping is ignored: half a stop would leave processes.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
