"""The filtering proxy on its own, attacked with raw sockets: whatever bytes a client
sends, nothing reaches an origin outside the allowed set."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.browser.guard_proxy import OriginProxy
from gateway.browser.guards import BlockedRequest


class Upstream:
    """A loopback server that records every request head it receives."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        self.heads.append(head.decode("latin-1"))
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        body = await reader.readexactly(length) if length else b""
        answer = b"hello " + body
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
            % (len(answer), answer)
        )
        await writer.drain()
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def setup() -> AsyncIterator[tuple[OriginProxy, str, str, Upstream, list[BlockedRequest]]]:
    allowed, foreign = Upstream(), Upstream()
    allowed_url, foreign_url = await allowed.start(), await foreign.start()
    blocked: list[BlockedRequest] = []
    proxy = OriginProxy(blocked.append)
    await proxy.start()
    proxy.allow(frozenset({allowed_url}))
    yield proxy, allowed_url, foreign_url, foreign, blocked
    await proxy.close()
    await allowed.close()
    await foreign.close()


async def _send(proxy: OriginProxy, data: bytes) -> bytes:
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536 * 4), 5)
    finally:
        writer.close()


async def _read_all(proxy: OriginProxy, data: bytes) -> bytes:
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    chunks = []
    while chunk := await asyncio.wait_for(reader.read(65536), 5):
        chunks.append(chunk)
    writer.close()
    return b"".join(chunks)


Setup = tuple[OriginProxy, str, str, Upstream, list[BlockedRequest]]


async def test_allowed_request_is_forwarded_with_its_body(setup: Setup) -> None:
    proxy, allowed, _foreign, _log, blocked = setup
    answer = await _read_all(
        proxy,
        f"POST {allowed}/save?x=1 HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 4\r\n"
        "Proxy-Authorization: secret\r\n\r\nbody".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert b"Connection: close" in answer
    assert answer.endswith(b"hello body")
    assert blocked == []


async def test_foreign_request_never_reaches_the_foreign_server(setup: Setup) -> None:
    proxy, _allowed, foreign, log, blocked = setup
    answer = await _send(proxy, f"GET {foreign}/steal HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403")
    nav = await _send(
        proxy,
        f"GET {foreign}/page HTTP/1.1\r\nSec-Fetch-Dest: document\r\n\r\n".encode(),
    )
    # A refused navigation is answered 204, which a browser does not commit.
    assert nav.startswith(b"HTTP/1.1 204")
    assert log.heads == []
    assert [b.target for b in blocked] == [f"{foreign}/steal", f"{foreign}/page"]
    assert blocked[1].navigation


async def test_a_second_request_on_the_connection_is_not_forwarded(setup: Setup) -> None:
    proxy, allowed, foreign, log, _blocked = setup
    two = (
        f"GET {allowed}/one HTTP/1.1\r\nHost: a\r\n\r\n"
        f"GET {foreign}/two HTTP/1.1\r\nHost: b\r\n\r\n"
    ).encode()
    answer = await _read_all(proxy, two)
    assert answer.count(b"HTTP/1.1") == 1
    assert log.heads == []


async def test_spoofed_origins_are_refused(setup: Setup) -> None:
    proxy, allowed, foreign, log, _blocked = setup
    port = allowed.rsplit(":", 1)[1]
    foreign_port = foreign.rsplit(":", 1)[1]
    for target in (
        f"http://2130706433:{port}/",
        f"http://0x7f.1:{port}/",
        f"http://127.0.0.1:{port}@127.0.0.1:{foreign_port}/",
        f"https://127.0.0.1:{port}/",
        "/relative",
        f"ftp://127.0.0.1:{port}/",
    ):
        answer = await _send(proxy, f"GET {target} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403"), target
    assert log.heads == []


async def test_connect_only_to_allowed_host_and_port(setup: Setup) -> None:
    proxy, allowed, foreign, log, blocked = setup
    authority = allowed.removeprefix("http://")
    foreign_authority = foreign.removeprefix("http://")
    for target in (foreign_authority, "127.0.0.1", f"localhost:{authority.split(':')[1]}"):
        answer = await _send(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403"), target
    assert log.heads == []
    assert len(blocked) == 3
    # An allowed tunnel carries bytes to the allowed server only.
    answer = await _read_all(
        proxy,
        f"CONNECT {authority} HTTP/1.1\r\n\r\nGET /in-tunnel HTTP/1.1\r\nHost: a\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 200 Connection Established")
    assert b"hello" in answer


async def test_nothing_is_allowed_before_a_task_is_named() -> None:
    upstream = Upstream()
    url = await upstream.start()
    blocked: list[BlockedRequest] = []
    proxy = OriginProxy(blocked.append)
    await proxy.start()
    try:
        answer = await _send(proxy, f"GET {url}/ HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403")
        assert upstream.heads == []
    finally:
        await proxy.close()
        await upstream.close()
