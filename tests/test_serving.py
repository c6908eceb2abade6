"""The in-process server of the tests, the demo and the benches: a real uvicorn on a real
port, bound before it is handed over."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.serving import free_port, listening_socket, serving


def test_the_listening_socket_hands_nodelay_to_every_connection() -> None:
    # Without TCP_NODELAY a response written in two parts waits for the client's delayed
    # ACK (40 ms on Linux), so every request to the server took that long.
    with listening_socket("127.0.0.1") as sock:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        client = socket.create_connection(sock.getsockname())
        sock.setblocking(True)
        accepted, _ = sock.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


async def test_serving_answers_on_its_port_and_stops() -> None:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        assert (await http.post("/echo", json={"a": 1})).json() == {"a": 1}
    port = int(base.rsplit(":", 1)[1])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more


def test_free_ports_are_outside_the_range_outgoing_connections_take() -> None:
    # A port from the ephemeral range, free when chosen, can become the local end of a
    # client's connection (a health check polling the server about to bind it).
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(not low <= port <= high for port in ports)
    with listening_socket("127.0.0.1", ports[0]) as sock:  # and it is free to listen on
        assert sock.getsockname()[1] == ports[0]


async def test_serving_takes_a_socket_bound_before_the_app_was_built() -> None:
    async def where(request: Request) -> JSONResponse:
        return JSONResponse({"port": request.url.port})

    sock = listening_socket("127.0.0.1")
    port = sock.getsockname()[1]
    app = Starlette(routes=[Route("/where", where)])
    async with serving(app, sock=sock) as base, httpx.AsyncClient(base_url=base) as http:
        assert base == f"http://127.0.0.1:{port}"
        assert (await http.get("/where")).json() == {"port": port}
    assert sock.fileno() == -1  # closed with the server


def test_a_listening_socket_on_an_ipv6_host() -> None:
    # `gateway serve --host ::1` binds through it, as uvicorn would bind the host itself.
    try:
        sock = listening_socket("::1")
    except OSError as error:  # a machine without IPv6 loopback
        pytest.skip(f"no IPv6 loopback here: {error}")
    with sock:
        assert sock.family == socket.AF_INET6
        client = socket.create_connection(("::1", sock.getsockname()[1]))
        client.close()
