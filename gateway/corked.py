"""A transport that sends a response's head with its body, in one packet.

uvicorn writes a response's head and its body with a write each. With Nagle's algorithm
off, as asyncio sets it, each write is a packet and each packet wakes the client: it reads
the head, sleeps, and is woken again for the body. An answer that the client could read
whole at once costs it, and the server whose send hands the CPU to it, a second wake-up on
every request.

The protocol marks the write that will be a response's head (`hold_next`, once the
request's head is in). `CorkedTransport` holds that one write until the next, which takes
it along at once, or until the end of the loop's turn, whichever comes first: the head of
a response whose body is ready leaves with the body, with no wait; a head whose body is
not ready (a stream) leaves at the end of the turn that wrote it. Every other write (a
stream's events, the rest of a body) goes straight to the socket's transport.

Nothing waits on the held head: it is counted in the write buffer's size (the protocol's
flow control sees it), sent by `flush` before the transport closes or half-closes and
whenever the protocol must send at once (the client's end of the stream, a websocket
upgrade), and dropped only by `abort`, as the transport's own buffer is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class CorkedTransport(asyncio.Transport):
    """`transport`, a response's head held until its body or the end of the loop's turn."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._hold_next = False
        self._head = b""  # the held write; empty when none is
        self._turn_end: asyncio.Handle | None = None

    def hold_next(self) -> None:
        """The next write is a response's head: it waits for the one after it."""
        self._hold_next = True

    # -- writing ----------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._head:
            self._send(self._head, bytes(data))  # the held head goes with this write, now
        elif self._hold_next:
            self._hold_next = False
            self._head = bytes(data)
            self._turn_end = self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        """Send what is held now."""
        if self._head:
            self._send(self._head)

    def _send(self, *parts: bytes) -> None:
        self._drop()
        if not self._transport.is_closing():
            self._transport.writelines(parts)

    def _drop(self) -> None:
        if self._turn_end is not None:
            self._turn_end.cancel()
            self._turn_end = None
        self._head = b""

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._head)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._drop()
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
