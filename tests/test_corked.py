"""The server's corked transport: a response's head leaves with its body, in one packet, and
nothing it holds is kept past the loop's turn, lost on close, or sent after an abort."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from uvicorn.server import ServerState

from gateway.corked import CorkedTransport
from gateway.serving import SERVER_OPTIONS, HeadDeadlineProtocol, serving

# struct tcp_info (linux/tcp.h): tcpi_data_segs_in and tcpi_data_segs_out, the segments with
# data that a connection has received and sent (Linux 4.6 and later).
_DATA_SEGS = struct.Struct("=II")
_DATA_SEGS_AT = 152


def data_segments(sock: socket.socket) -> tuple[int, int]:
    """(received, sent): segments carrying data on this TCP connection so far."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    assert len(info) >= _DATA_SEGS_AT + _DATA_SEGS.size, "a kernel without tcpi_data_segs_in"
    received, sent = _DATA_SEGS.unpack_from(info, _DATA_SEGS_AT)
    return received, sent


def exchange(client: socket.socket, request: bytes) -> bytes:
    """Send one HTTP request on a blocking socket; the body of its response (which has a
    content-length)."""
    client.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += client.recv(65536)
    return body


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_response_head_and_body_reach_the_client_in_one_packet(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    # uvicorn writes the head and the body apart: uncorked, the client got two packets and
    # was woken for each. On both loops (`gateway serve` runs on uvloop).
    async def page(request: Request) -> JSONResponse:
        return JSONResponse({"text": "x" * 4000})

    async def exchanges() -> None:
        app = Starlette(routes=[Route("/page", page)])
        async with serving(app) as base:
            host, port = base.removeprefix("http://").rsplit(":", 1)
            client = socket.create_connection((host, int(port)))
            with client:
                for _ in range(3):  # every response of a kept-alive connection
                    before, _ = data_segments(client)
                    request = f"GET /page HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
                    body = await asyncio.to_thread(exchange, client, request)
                    after, _ = data_segments(client)
                    assert body.startswith(b'{"text":"xxx')
                    assert after - before == 1

    run(exchanges())


async def test_a_streamed_chunk_is_not_held_back() -> None:
    # Only a response's head waits, and never past the loop's turn: a stream's first chunk
    # reaches the client while the stream still waits for its second.
    second = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first;"
        await second.wait()
        yield b"second"

    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(chunks(), media_type="text/plain")

    app = Starlette(routes=[Route("/stream", stream)])
    async with serving(app) as base:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET /stream HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
        got = b""
        while b"first;" not in got:
            got += await asyncio.wait_for(reader.read(65536), timeout=10)
        assert b"second" not in got
        second.set()
        while b"second" not in got:
            got += await asyncio.wait_for(reader.read(65536), timeout=10)
        writer.close()


async def corked_pair() -> tuple[CorkedTransport, socket.socket]:
    """A corked transport on one end of a real TCP connection, and the other end."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, accepted)
    return CorkedTransport(transport, loop), peer


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


async def test_a_head_waits_for_its_body_or_the_turns_end_and_nothing_else_waits() -> None:
    corked, peer = await corked_pair()
    with peer:
        raw = corked.get_extra_info("socket")
        _, sent = data_segments(raw)
        corked.hold_next()
        corked.write(b"head;")
        # Held, not lost to flow control: the protocol sees it as buffered.
        assert corked.get_write_buffer_size() == len(b"head;")
        assert data_segments(raw)[1] == sent
        # The body takes it along at once, in one packet, without waiting for the turn.
        corked.writelines([b"body", b";"])
        assert corked.get_write_buffer_size() == 0
        assert data_segments(raw)[1] == sent + 1
        # Any other write goes straight out (a stream's event is never held).
        corked.write(b"event;")
        assert data_segments(raw)[1] == sent + 2
        # A head whose body is not ready leaves when the turn ends.
        corked.hold_next()
        corked.write(b"stream head")
        assert data_segments(raw)[1] == sent + 2
        await asyncio.sleep(0)
        assert data_segments(raw)[1] == sent + 3
        expected = b"head;body;event;stream head"
        received = b""
        while len(received) < len(expected):
            received += await asyncio.to_thread(peer.recv, 65536)
        assert received == expected
        corked.close()


async def test_close_sends_what_is_held_and_abort_drops_it() -> None:
    corked, peer = await corked_pair()
    with peer:
        corked.hold_next()
        corked.write(b"the last words")
        corked.close()  # in the same turn as the write
        assert await asyncio.to_thread(read_until_closed, peer) == b"the last words"

    corked, peer = await corked_pair()
    with peer:
        corked.hold_next()
        corked.write(b"never sent")
        corked.abort()
        assert corked.get_write_buffer_size() == 0  # dropped, not merely refused later
        await asyncio.sleep(0)
        try:
            left = await asyncio.to_thread(read_until_closed, peer)
        except ConnectionResetError:
            left = b""
        assert left == b""


async def test_the_clients_end_of_stream_does_not_lose_a_held_head() -> None:
    # When the client half-closes, uvicorn's protocol lets the socket's transport close
    # itself, around the cork: the protocol sends what is held first.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("no request is made")

    config = uvicorn.Config(app, **SERVER_OPTIONS)
    config.load()
    protocol = HeadDeadlineProtocol(config=config, server_state=ServerState(), app_state={})
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    with peer:
        await loop.connect_accepted_socket(lambda: protocol, accepted)
        protocol._corked.hold_next()
        protocol.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        # What the socket's transport does when the client's FIN comes in: it tells the
        # protocol, then closes itself.
        protocol.eof_received()
        protocol._uncorked.close()
        received = await asyncio.to_thread(read_until_closed, peer)
        assert received == b"HTTP/1.1 204 No Content\r\n\r\n"
