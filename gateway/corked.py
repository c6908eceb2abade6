"""A transport that sends a response's head with its body, in one packet.

uvicorn writes a response's head and its body with a write each. With Nagle's algorithm
off, as asyncio sets it, each write is a packet and each packet wakes the client: it reads
the head, sleeps, and is woken again for the body. An answer that the client could read
whole at once costs it, and the server whose send hands the CPU to it, a second wake-up on
every request.

`CorkedTransport` holds a write until the next one, which takes it along, or until the end
of the loop's turn, whichever comes first. The head of a response whose body is ready goes
out with the body, at once; a head whose body is not (a stream) goes out at the end of the
turn that wrote it, as does a stream's chunk. A write is never held longer, nor behind
another response's work: the body's write sends both without waiting for the turn to end.

Nothing waits on the held bytes: they are counted in the write buffer's size (so the
protocol's flow control sees them), sent before the transport closes or half-closes, and
dropped only by `abort`, as the transport's own buffer is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class CorkedTransport(asyncio.Transport):
    """`transport`, each write held until the next one or the end of the loop's turn."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0

    # -- writing ----------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._held.append(bytes(data))
        self._size += len(data)
        if len(self._held) == 1:
            self._loop.call_soon(self._send)
        else:
            self._send()  # the write that was held goes with this one, now

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def _send(self) -> None:
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        self._size = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._send()
        self._transport.write_eof()

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        self._send()
        self._transport.close()

    def abort(self) -> None:
        self._held.clear()
        self._size = 0
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    # -- the rest is the transport's own ----------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()
