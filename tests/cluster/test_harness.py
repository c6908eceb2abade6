"""The harness that starts and stops a cluster's processes: NATS that comes back on its
port, HAProxy's configuration and routing (on tiny HTTP backends, not gateways), the doc's
copy of that configuration, and a whole LocalCluster that leaves no process behind."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.msg import Msg

from gateway.serving import free_port
from tests.servers.cluster import LocalCluster
from tests.servers.haproxy import (
    HINTS_PER_10S,
    Backend,
    HAProxy,
    HAProxyConfigError,
    check_config,
    haproxy,
    render_config,
)
from tests.servers.nats import NatsUser, nats_server, node_user
from tests.servers.nats import render_config as render_nats_config
from tests.servers.postgres import Cluster

DOCS = Path(__file__).resolve().parents[2] / "docs"

# -- NATS --------------------------------------------------------------------------------

ANYONE = NatsUser("anyone", "anyone-password-0123456789")


@pytest.mark.parametrize("take_away", ["stop", "kill"])
async def test_a_client_is_served_again_when_nats_comes_back_on_its_port(
    tmp_path: Path, nats_bin: Path, take_away: str
) -> None:
    with nats_server(tmp_path / "nats.log", users=[ANYONE]) as server:
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        async def echo(msg: Msg) -> None:
            await msg.respond(b"echo:" + msg.data)

        client = await nats.connect(
            server.url,
            **ANYONE.credentials,
            reconnected_cb=on_reconnect,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
        )
        try:
            await client.subscribe("cluster.echo", cb=echo)
            assert (await client.request("cluster.echo", b"one", timeout=5)).data == b"echo:one"

            port = server.port
            down: Callable[[], None] = getattr(server, take_away)
            await asyncio.to_thread(down)
            assert not server.running
            await asyncio.to_thread(server.start)
            assert server.port == port

            await asyncio.wait_for(reconnected.wait(), timeout=60)
            # The subscription came back with the connection: request-reply works again.
            assert (await client.request("cluster.echo", b"two", timeout=5)).data == b"echo:two"
        finally:
            await client.close()
    assert not server.running
    assert "Server is ready" in (tmp_path / "nats.log").read_text()


def test_nats_listens_on_loopback_only(tmp_path: Path, nats_bin: Path) -> None:
    with nats_server(tmp_path / "nats.log", users=[ANYONE]) as server:
        assert server.url == f"nats://127.0.0.1:{server.port}"
        log = (tmp_path / "nats.log").read_text()
        assert f"Listening for client connections on 127.0.0.1:{server.port}" in log
        # Core NATS only: nothing kept on disk.
        assert "Starting JetStream" not in log


def test_the_deploy_doc_shows_the_nats_configuration_the_tests_use() -> None:
    users = [node_user(f"node-{i}", f"<node-{i}'s password>") for i in (1, 2, 3)]
    rendered = render_nats_config("0.0.0.0", 4222, users)
    doc = (DOCS / "deploy.md").read_text()
    assert f"```nats\n{rendered}```" in doc, (
        "docs/deploy.md's NATS configuration differs from render_config's: paste this in\n"
        + rendered
    )


# -- HAProxy's configuration --------------------------------------------------------------


def test_the_rendered_configuration_passes_haproxy_check(tmp_path: Path, haproxy_bin: Path) -> None:
    config = render_config(
        front_port=free_port(),
        backends=[Backend(f"node-{i}", free_port()) for i in (1, 2, 3)],
        stats_socket=tmp_path / "stats.sock",
    )
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    check_config(path)

    # The check is a real one: a configuration HAProxy refuses is reported with its words.
    path.write_text(config.replace("balance hash", "balance no-such-algorithm"))
    with pytest.raises(HAProxyConfigError, match="balance"):
        check_config(path)


def test_the_deploy_doc_shows_the_configuration_the_tests_use() -> None:
    # With the ports and socket the doc shows it with.
    rendered = render_config(
        front_port=8080,
        backends=[Backend("node-1", 8101), Backend("node-2", 8102), Backend("node-3", 8103)],
        stats_socket=Path("/run/haproxy/gateway.sock"),
    )
    doc = (DOCS / "deploy.md").read_text()
    assert f"```haproxy\n{rendered}```" in doc, (
        "docs/deploy.md's HAProxy configuration differs from render_config's: paste this in\n"
        + rendered
    )


# -- HAProxy routing, on tiny backends -------------------------------------------------------


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # HAProxy closes a health check's connection once it has read the status line, so
        # a reset while the body is written is the normal end of a check, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class NamedServer:
    """A tiny HTTP server that answers /healthz, and its own name to anything else."""

    def __init__(self, name: str) -> None:
        self.name = name

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"ok" if self.path == "/healthz" else name.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test's output is not the place for an access log

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening: connections to the port are refused from now on."""
        if self._thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self._thread.join()


@contextlib.contextmanager
def front_over(
    names: list[str], workdir: Path, *, hints_per_10s: int = HINTS_PER_10S
) -> Iterator[tuple[HAProxy, str, list[NamedServer]]]:
    """HAProxy in front of a NamedServer for each name; the front's URL."""
    servers = [NamedServer(name) for name in names]
    # A short path of its own: a unix socket's path has a limit of about 100 bytes.
    socket_dir = Path(tempfile.mkdtemp(prefix="gw-test-haproxy-"))
    stats = socket_dir / "stats.sock"
    port = free_port()
    config = render_config(
        front_port=port,
        backends=[Backend(s.name, s.port) for s in servers],
        stats_socket=stats,
        hints_per_10s=hints_per_10s,
    )
    try:
        with haproxy(config, workdir, stats_socket=stats) as front:
            for server in servers:
                front.wait_for_state(server.name, up=True)
            yield front, f"http://127.0.0.1:{port}", servers
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(socket_dir, ignore_errors=True)


def test_a_task_hint_keeps_its_requests_on_one_backend_and_a_dead_one_leaves_the_rotation(
    tmp_path: Path, haproxy_bin: Path
) -> None:
    with (
        front_over(["node-1", "node-2", "node-3"], tmp_path) as (front, url, servers),
        httpx.Client(base_url=url, timeout=10) as client,
    ):

        def served_by(task: str | None = None, *, param: str | None = None) -> str:
            # The header hint of an agent's request (which carries its token); the query
            # parameter of a tab channel's.
            headers = {"Gateway-Task": task, "Authorization": "Bearer tok"} if task else {}
            params = {"task": param} if param is not None else {}
            path = "/v1/tabs" if param is not None else "/v1/anything"
            answer = client.get(path, headers=headers, params=params)
            assert answer.status_code == 200
            return answer.text

        tasks = [f"tsk_{secrets.token_hex(8)}" for _ in range(24)]
        placed = {task: served_by(task) for task in tasks}
        # The same hint, asked again, and given as a tab channel's query parameter
        # instead of the header (`/v1/tabs?task=...`), lands on the same backend.
        for task in tasks:
            assert served_by(task) == placed[task]
            assert served_by(param=task) == placed[task]
        assert len(set(placed.values())) > 1, "24 tasks all hashed to one backend"

        # The header wins over the query parameter.
        one, other = next((a, b) for a in tasks for b in tasks if placed[a] != placed[b])
        assert served_by(one, param=other) == placed[one]

        # No hint: round robin (on the hash's ring, so not in a strict turn) over them all.
        assert {served_by() for _ in range(30)} == {"node-1", "node-2", "node-3"}

        # A backend that stops answering leaves the rotation: its tasks move to the others,
        # and (the hash being consistent) every other task stays where it was.
        dead = servers[1]
        dead.close()
        front.wait_for_state(dead.name, up=False)
        for task in tasks:
            now = served_by(task)
            assert now != dead.name
            if placed[task] != dead.name:
                assert now == placed[task]
        assert {served_by() for _ in range(30)} == {"node-1", "node-3"}


def test_a_made_up_hint_pins_nothing_and_no_client_steers_more_than_its_share(
    tmp_path: Path, haproxy_bin: Path
) -> None:
    limit = 20
    with (
        front_over(["node-1", "node-2", "node-3"], tmp_path, hints_per_10s=limit) as (
            _front,
            url,
            _servers,
        ),
        httpx.Client(base_url=url, timeout=10) as client,
    ):

        def served_by(headers: dict[str, str], path: str = "/v1/anything") -> str:
            answer = client.get(path, headers=headers)
            assert answer.status_code == 200
            return answer.text

        hint = "tsk_" + "0" * 16
        # A hint on a request with no token, or on any path but a tab channel's as its
        # query parameter, is not followed: round robin over every node.
        untokened = Counter(served_by({"Gateway-Task": hint}) for _ in range(30))
        assert set(untokened) == {"node-1", "node-2", "node-3"}, untokened
        misplaced = Counter(served_by({}, f"/v1/anything?task={hint}") for _ in range(30))
        assert set(misplaced) == {"node-1", "node-2", "node-3"}, misplaced

        # With a token (made up: HAProxy cannot tell), the hint steers this client's first
        # `limit` requests; past them its requests go round robin like any others.
        tokened = {"Gateway-Task": hint, "Authorization": "Bearer made-up"}
        served = [served_by(tokened) for _ in range(3 * limit)]
        assert len(set(served[:limit])) == 1, served[:limit]
        assert set(served[limit:]) == {"node-1", "node-2", "node-3"}, served[limit:]
        pinned = Counter(served)[served[0]]
        assert pinned < 2 * limit, served


# -- a whole cluster ------------------------------------------------------------------------


@pytest.mark.cluster
def test_a_local_cluster_serves_through_its_front_and_leaves_no_process_behind(
    tmp_path: Path, postgres: Cluster, haproxy_bin: Path, nats_bin: Path
) -> None:
    cluster = LocalCluster(3, workdir=tmp_path / "cluster", postgres=postgres)
    with cluster:
        assert [node.id for node in cluster.nodes] == ["node-1", "node-2", "node-3"]
        assert len({node.port for node in cluster.nodes}) == 3
        for node in cluster.nodes:
            assert httpx.get(f"{node.url}/healthz", timeout=10).json()["status"] == "ok"
            assert node.env["GATEWAY_PUBLIC_URL"] == cluster.front_url
            # The same keys on every node, and nothing of the runner's AWS setup.
            assert node.env["GATEWAY_CONTROL_KEY"] == cluster.control_key
            assert node.env["AWS_ACCESS_KEY_ID"] == "testing"
        assert httpx.get(f"{cluster.front_url}/healthz", timeout=10).json()["status"] == "ok"
        assert cluster.haproxy.server_states() == {
            "node-1": "UP",
            "node-2": "UP",
            "node-3": "UP",
        }
        running = cluster.leftover_processes()
        # NATS, the S3 server, HAProxy and the three nodes, all found by their marker.
        assert len(running) >= 6
        assert all(node.pid in dict(running) for node in cluster.nodes)
        assert (cluster.logs_dir / "node-2.log").read_text().count("GET /healthz") > 0

    assert cluster.leftover_processes() == []
    assert all(not node.running for node in cluster.nodes)


@pytest.mark.cluster
def test_a_node_killed_leaves_the_rotation_and_restarts_on_its_port(
    tmp_path: Path, postgres: Cluster, haproxy_bin: Path, nats_bin: Path
) -> None:
    with LocalCluster(2, workdir=tmp_path / "cluster", postgres=postgres) as cluster:
        node = cluster.node("node-2")
        port, pid = node.port, node.pid
        cluster.kill(node)
        assert cluster.node_processes(node) == []
        cluster.wait_out_of_rotation(node)
        # The front still answers, from the node that is left.
        assert httpx.get(f"{cluster.front_url}/healthz", timeout=10).status_code == 200

        cluster.restart(node)
        assert node.port == port and node.pid not in (None, pid)
        assert httpx.get(f"{node.url}/healthz", timeout=10).status_code == 200
        assert cluster.haproxy.server_states()["node-2"] == "UP"

        # A frozen node answers nothing until thawed.
        cluster.stop(node)
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{node.url}/healthz", timeout=1)
        cluster.cont(node)
        assert httpx.get(f"{node.url}/healthz", timeout=10).status_code == 200

        nats_port = cluster.nats.port
        cluster.restart_nats()
        assert cluster.nats.running and cluster.nats.port == nats_port
    assert cluster.leftover_processes() == []
