"""The in-process server of the tests, the demo and the benches: a real uvicorn on a real
port, bound before it is handed over."""

from __future__ import annotations

import socket

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.serving import listening_socket, serving


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
