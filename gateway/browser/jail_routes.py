"""Where a connection to a jail's guard socket goes: to the guard of the context whose
address it came to.

A jailed Chromium's contexts all reach one listening socket in its jail (port
`GUARD_PORT` on every loopback address); each context's proxy setting names a loopback
address of its own (`http://127.x.y.z:4`). Whoever serves the jails' sockets (the gateway
itself, or the guard's own process, `guard_worker.py`) keeps one `JailRoutes`: the servers
of the jails' sockets, and which handler answers at which address. A connection to an
address no context of that browser owns is closed without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .http_relay import MAX_HEAD_BYTES

# The guard's port inside every jail. Low and unassigned: a browser that is not in a jail
# and is handed such an address finds nothing listening on the host (a refusal), and it is
# not on Chromium's list of ports it refuses to use.
GUARD_PORT = 4

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class _Route:
    handler: Handler
    pid: int | None  # the jail this address belongs to; None: any (a remote's jail)


class JailRoutes:
    """The guard sockets being served, by browser pid, and the handler at each address."""

    def __init__(self) -> None:
        self._servers: dict[int, asyncio.Server] = {}
        self._routes: dict[str, _Route] = {}

    async def serve(self, pid: int, guard: socket.socket) -> None:
        """Serve the guard socket of browser `pid` (a socket served before for it is
        closed: the browser reported in again)."""
        guard.setblocking(False)
        server = await asyncio.start_server(
            lambda r, w: self._route(pid, r, w), sock=guard, limit=MAX_HEAD_BYTES
        )
        old = self._servers.pop(pid, None)
        if old is not None:
            old.close()
        self._servers[pid] = server

    def forget(self, pid: int) -> None:
        """Browser `pid` is gone: stop serving its socket."""
        server = self._servers.pop(pid, None)
        if server is not None:
            server.close()

    def add(self, address: str, handler: Handler, pid: int | None) -> None:
        self._routes[address] = _Route(handler, pid)

    def remove(self, address: str) -> None:
        self._routes.pop(address, None)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
        self._routes.clear()

    async def _route(
        self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        local = writer.get_extra_info("sockname")
        route = self._routes.get(local[0]) if local else None
        if route is None or route.pid not in (pid, None):
            # An address no context of this browser owns: nothing to say to it.
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        await route.handler(reader, writer)
