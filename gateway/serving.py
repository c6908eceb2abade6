"""Run an ASGI app on a loopback socket inside the current event loop.

Used by `gateway demo`, the benchmarks and the tests: a real uvicorn server on a real
port, started and stopped within one `async with`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.corked import CorkedTransport

# A request's head (its request line and headers) must arrive whole within this time of the
# connection opening or of the previous answer: a client trickling a header line every few
# seconds would otherwise hold its connection (and a server slot) for as long as it likes.
HEAD_TIMEOUT_S = 10.0


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline for each request's head, writing through a
    `CorkedTransport`."""

    _head_deadline: asyncio.TimerHandle | None = None
    _corked: CorkedTransport
    _uncorked: asyncio.Transport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # A response's head and body leave in one packet (`gateway.corked`).
        self._uncorked = transport
        self._corked = CorkedTransport(transport, self.loop)
        super().connection_made(self._corked)
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        # A request that waits behind another's response (pipelined) starts later, when its
        # head has nothing to be joined with in this turn.
        starts_now = self.cycle is None or self.cycle.response_complete
        super().on_headers_complete()
        if starts_now:
            self._corked.hold_next()

    def eof_received(self) -> None:
        # The socket's transport closes itself next (this returns nothing): what is held
        # goes out first.
        self._corked.flush()
        super().eof_received()

    def handle_websocket_upgrade(self) -> None:
        # A websocket frame is one write already: it goes straight to the socket, after
        # anything an earlier response still holds.
        self._corked.flush()
        self.transport = self._uncorked
        super().handle_websocket_upgrade()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's head is due now, unless it is already in (pipelined).
        if not self.transport.is_closing() and not self.pipeline:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


# How every server here speaks HTTP and websockets (`gateway serve`, the example's servers,
# the tests' and benches' servers). Websocket frames of at most 1 MiB. No permessage-deflate:
# tab frames are small JSON (turning it off made no measurable difference to the tab bench),
# and a tab token compressed in one connection's shared window with page-chosen text is the
# shape of a compression side channel. Forwarded headers are not trusted.
SERVER_OPTIONS: dict[str, Any] = {
    "http": HeadDeadlineProtocol,
    "ws_max_size": 1024 * 1024,
    "ws_per_message_deflate": False,
    "proxy_headers": False,
}


# Ports handed out by `free_port` in this process, so that two calls never name the same one.
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> range:
    """The ports the kernel picks from for outgoing connections and for binding port 0."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server started later, often in another process.

    The port is chosen outside the kernel's ephemeral range: a port from that range, free
    when chosen, can become the local end of any outgoing connection (a health check
    polling the very server about to bind it) before the server binds it. Where a server
    starts in this process, bind its socket at once instead (`listening_socket`).
    """
    ephemeral = _ephemeral_range()
    # Below 65535, so that the port after it exists too (the example's shared sandbox).
    candidates = [p for p in range(10000, 65535) if p not in ephemeral and p not in _HANDED_OUT]
    for port in random.sample(candidates, min(len(candidates), 200)):
        with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    # An ephemeral range that leaves nothing outside it: the kernel's choice, as before.
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
    _HANDED_OUT.add(chosen)
    return chosen


def _family(host: str) -> socket.AddressFamily:
    # As uvicorn binds a host itself: an address with a colon is IPv6.
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def listening_socket(host: str, port: int = 0) -> socket.socket:
    """A bound, listening, non-blocking socket ready for uvicorn: on `port`, or on a free
    port the kernel picks (read it back with `getsockname`)."""
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. uvicorn sets it only on sockets it binds itself;
    # without it every response written in two parts waited for the client's delayed ACK:
    # 44 ms per request on loopback, where 0.8 ms is what it takes.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except (OSError, OverflowError):  # OverflowError: a port past 65535
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class QuietServer(uvicorn.Server):
    """A server that leaves signal handling to its host (a test run, the demo, a bench, or
    `gateway serve --example`, whose servers share one process: each capturing SIGINT for
    itself would stop only one of them)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
) -> AsyncIterator[str]:
    """Serve `app` until the block ends; yields its base URL (`http://host:port`).

    The server listens on `sock` when given (bound already, e.g. because its address had
    to be known before the app was built), else on a socket bound here to `port` (a free
    one when 0); either is closed when the block ends. Bound before the server starts, the
    port cannot be taken by someone else between choosing it and listening.
    """
    if sock is None:
        sock = listening_socket(host, port)
    port = sock.getsockname()[1]
    sockets = [sock]
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        ws_ping_interval=None,
        **SERVER_OPTIONS,
    )
    server = QuietServer(config)
    task = asyncio.create_task(server.serve(sockets=sockets))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises the start-up error
                raise RuntimeError("the server stopped during start-up")
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=15)
        for each in sockets:
            each.close()
