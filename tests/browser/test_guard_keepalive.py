"""The guard keeps upstream connections alive per task and origin, and never lets a kept
connection carry what does not belong to the next request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.browser.guard_proxy import OriginProxy
from gateway.browser.guards import BlockedRequest


class KeepAliveApp:
    """A loopback HTTP/1.1 server that serves many requests per connection and counts its
    connections. `extra` bytes are sent after the first response of each connection (a
    server that answers more than was asked); `close_idle` closes a connection after each
    response, without saying so."""

    def __init__(self, *, chunked: bool = False, extra: bytes = b"", close_idle: bool = False):
        self.chunked = chunked
        self.extra = extra
        self.close_idle = close_idle
        self.connections = 0
        self.requests: list[str] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = True
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                self.requests.append(head.split("\r\n", 1)[0])
                length = 0
                for line in head.split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if length:
                    await reader.readexactly(length)
                body = f"answer {len(self.requests)}".encode()
                if self.chunked:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                if first and self.extra:
                    writer.write(self.extra)
                first = False
                await writer.drain()
                if self.close_idle:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def guarded() -> AsyncIterator[tuple[OriginProxy, list[BlockedRequest]]]:
    blocked: list[BlockedRequest] = []
    proxy = OriginProxy(blocked.append)
    await proxy.start()
    yield proxy, blocked
    await proxy.close()


async def _get(proxy: OriginProxy, url: str, body: bytes = b"") -> bytes:
    """One request on a client connection of its own, as the guard makes Chromium do."""
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    method = "POST" if body else "GET"
    writer.write(
        f"{method} {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    await writer.drain()
    chunks = []
    while chunk := await asyncio.wait_for(reader.read(65536), 5):
        chunks.append(chunk)
    writer.close()
    return b"".join(chunks)


async def _serve(app: KeepAliveApp, guarded: tuple[OriginProxy, list[BlockedRequest]]) -> str:
    proxy, _ = guarded
    origin = await app.start()
    proxy.allow(frozenset({origin}))
    return origin


async def test_a_page_of_many_requests_reuses_one_upstream_connection(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    app = KeepAliveApp()
    origin = await _serve(app, guarded)
    try:
        answers = [await _get(guarded[0], f"{origin}/asset/{i}") for i in range(12)]
    finally:
        await app.close()
    assert [a.rsplit(b"\r\n\r\n", 1)[1] for a in answers] == [
        f"answer {i}".encode() for i in range(1, 13)
    ]
    # Each answer still tells the browser to close its side: one request per client
    # connection, each checked on its own.
    assert all(b"Connection: close" in a for a in answers)
    assert app.connections == 1
    assert guarded[0].opened == 1


async def test_chunked_answers_are_relayed_whole_and_the_connection_kept(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    app = KeepAliveApp(chunked=True)
    origin = await _serve(app, guarded)
    try:
        first = await _get(guarded[0], f"{origin}/one")
        second = await _get(guarded[0], f"{origin}/two")
    finally:
        await app.close()
    assert first.endswith(b"8\r\nanswer 1\r\n0\r\n\r\n")
    assert second.endswith(b"8\r\nanswer 2\r\n0\r\n\r\n")
    assert app.connections == 1


async def test_bytes_past_an_answer_never_become_the_next_answer(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    smuggled = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED"
    app = KeepAliveApp(extra=smuggled)
    origin = await _serve(app, guarded)
    try:
        await _get(guarded[0], f"{origin}/one")
        await asyncio.sleep(0.05)
        second = await _get(guarded[0], f"{origin}/two")
    finally:
        await app.close()
    assert b"SMUGGLED" not in second
    assert second.endswith(b"answer 2")
    # The connection that carried more than its answer was not used again.
    assert app.connections == 2


async def test_a_connection_the_upstream_closed_is_not_reused(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    app = KeepAliveApp(close_idle=True)
    origin = await _serve(app, guarded)
    try:
        answers = [await _get(guarded[0], f"{origin}/p{i}") for i in range(4)]
    finally:
        await app.close()
    assert all(a.startswith(b"HTTP/1.1 200 OK") for a in answers)
    assert app.connections == 4
    # And none is left half open on the guard's side once the upstream closed it.
    for _ in range(200):
        if guarded[0].kept == 0:
            break
        await asyncio.sleep(0.01)
    assert guarded[0].kept == 0


async def test_kept_connections_end_with_the_origin_s_allowance(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    proxy, blocked = guarded
    app = KeepAliveApp()
    origin = await _serve(app, guarded)
    try:
        await _get(proxy, f"{origin}/one")
        proxy.allow(frozenset())
        refused = await _get(proxy, f"{origin}/two")
        proxy.allow(frozenset({origin}))
        again = await _get(proxy, f"{origin}/three")
    finally:
        await app.close()
    assert refused.startswith(b"HTTP/1.1 403")
    assert [b.target for b in blocked] == [f"{origin}/two"]
    assert app.requests == ["GET /one HTTP/1.1", "GET /three HTTP/1.1"]
    # The connection kept while the origin was allowed was closed when it stopped being.
    assert again.endswith(b"answer 2")
    assert app.connections == 2


async def test_a_request_with_a_body_goes_out_on_a_fresh_connection(
    guarded: tuple[OriginProxy, list[BlockedRequest]],
) -> None:
    app = KeepAliveApp()
    origin = await _serve(app, guarded)
    try:
        await _get(guarded[0], f"{origin}/page")
        posted = await _get(guarded[0], f"{origin}/save", body=b"name=x")
    finally:
        await app.close()
    assert posted.endswith(b"answer 2")
    # Its body streams from the browser and could not be sent again: no kept connection.
    assert app.connections == 2
