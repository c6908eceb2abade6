"""Foreign listeners a task's page must never reach: TCP and UDP on several loopback
addresses, each recording every connection and datagram it receives (with its first bytes,
which is where a page-chosen STUN USERNAME would show)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

ADDRESSES = ("127.0.0.1", "127.0.0.2", "::1")


@dataclass
class Heard:
    """What the listeners received: `(protocol, address, port, first bytes)` each."""

    events: list[tuple[str, str, int, bytes]] = field(default_factory=list)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, heard: Heard, address: str, port: int) -> None:
        self.heard, self.address, self.port = heard, address, port

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.heard.events.append(("udp", self.address, self.port, data[:64]))


@dataclass
class Listeners:
    heard: Heard
    udp: dict[str, int]  # address -> port
    tcp: dict[str, int]


@contextlib.asynccontextmanager
async def foreign_listeners() -> AsyncIterator[Listeners]:
    loop = asyncio.get_running_loop()
    heard = Heard()
    closers: list[object] = []
    udp: dict[str, int] = {}
    tcp: dict[str, int] = {}
    for address in ADDRESSES:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((address, 0))
        port = sock.getsockname()[1]
        transport, _ = await loop.create_datagram_endpoint(
            functools.partial(_Datagrams, heard, address, port), sock=sock
        )
        closers.append(transport)
        udp[address] = port

        async def accepted(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, a: str = address
        ) -> None:
            port = writer.get_extra_info("sockname")[1]
            with contextlib.suppress(Exception):
                first = await asyncio.wait_for(reader.read(64), 2)
                heard.events.append(("tcp", a, port, first))
                writer.close()
                return
            heard.events.append(("tcp", a, port, b""))
            writer.close()

        server = await asyncio.start_server(accepted, address, 0, family=family)
        closers.append(server)
        tcp[address] = server.sockets[0].getsockname()[1]
    try:
        yield Listeners(heard, udp, tcp)
    finally:
        for closer in closers:
            closer.close()  # type: ignore[attr-defined]
