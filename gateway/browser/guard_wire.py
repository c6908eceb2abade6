"""The wire between the gateway and its guard process: small JSON messages, and sockets.

One `SOCK_SEQPACKET` unix socket pair: each message is one JSON object in one packet, and
a socket handed over with it (a jail's guard socket, a stream to a task's provisioned app)
travels in that same packet, so it can never arrive apart from the message that says what
it is. Both ends are read and written from their event loop without awaiting: a message
is handled in full by the callback that reads it, so the order in which messages are sent
is the order in which their effects happen, also against the other sockets of the loop.

A message with an `id` asks for an answer: the answer carries `re` with that id (`ask`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# The largest message either side sends: a context's allowed origins, a refused target
# (cut to 2 KiB) and small answers, far below this.
MAX_MESSAGE = 64 * 1024
MAX_FDS = 1

Message = dict[str, Any]
# What a message handler gets: the message and the sockets that came with it (the
# handler owns them, and closes any it does not keep).
OnMessage = Callable[[Message, list[int]], None]


class WireClosed(ConnectionError):
    """The other end of the wire is gone (its process ended)."""


def pair() -> tuple[socket.socket, socket.socket]:
    """A fresh wire's two ends."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


class Wire:
    """One end of the wire, served by the running event loop from construction to
    `close` (or the other end's going away, told to `on_closed` once)."""

    def __init__(
        self, sock: socket.socket, on_message: OnMessage, on_closed: Callable[[], None]
    ) -> None:
        self._sock = sock
        self._on_message = on_message
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._outbox: deque[tuple[bytes, list[int]]] = deque()
        self._asks: dict[int, asyncio.Future[tuple[Message, list[int]]]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: Message, fds: tuple[int, ...] = ()) -> None:
        """Send `message` (with `fds`, which stay the caller's to close). A message sent
        on a closed wire is dropped: what it asked for ended with the other side."""
        if self.closed:
            return
        data = json.dumps(message, separators=(",", ":")).encode()
        if len(data) > MAX_MESSAGE:
            raise ValueError(f"a guard message of {len(data)} bytes is over {MAX_MESSAGE}")
        # The sockets are duplicated so a message that waits in the outbox keeps its own.
        kept = [os.dup(fd) for fd in fds]
        self._outbox.append((data, kept))
        if len(self._outbox) == 1:
            self._flush()

    async def ask(self, message: Message, fds: tuple[int, ...] = ()) -> tuple[Message, list[int]]:
        """Send `message` and wait for its answer (raises `WireClosed` if the other side
        goes away first). The caller owns the sockets of the answer."""
        if self.closed:
            raise WireClosed("the guard process is gone")
        ask_id = next(self._ids)
        answer: asyncio.Future[tuple[Message, list[int]]] = self._loop.create_future()
        self._asks[ask_id] = answer
        try:
            self.send({**message, "id": ask_id}, fds)
            return await answer
        finally:
            self._asks.pop(ask_id, None)

    def answer(self, question: Message, message: Message, fds: tuple[int, ...] = ()) -> None:
        """Answer a message that asked (`question` carries its `id`)."""
        self.send({**message, "re": question["id"]}, fds)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._sock.fileno())
            self._loop.remove_writer(self._sock.fileno())
        for _data, fds in self._outbox:
            close_fds(fds)
        self._outbox.clear()
        for answer in self._asks.values():
            if not answer.done():
                answer.set_exception(WireClosed("the guard process is gone"))
        self._sock.close()
        self._on_closed()

    def _flush(self) -> None:
        while self._outbox:
            data, fds = self._outbox[0]
            try:
                if fds:
                    rights = array.array("i", fds).tobytes()
                    self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
                else:
                    self._sock.send(data)
            except BlockingIOError:
                self._loop.add_writer(self._sock.fileno(), self._writable)
                return
            except OSError:
                self.close()
                return
            self._outbox.popleft()
            close_fds(fds)

    def _writable(self) -> None:
        self._loop.remove_writer(self._sock.fileno())
        self._flush()

    def _readable(self) -> None:
        while not self.closed:
            try:
                data, fds, flags, _ = socket.recv_fds(self._sock, MAX_MESSAGE, MAX_FDS)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            if not data:
                close_fds(fds)
                self.close()  # the other end closed its socket: its process is gone
                return
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                close_fds(fds)
                log.error("a guard message was cut short; it is dropped")
                continue
            try:
                message = json.loads(data)
                if not isinstance(message, dict):
                    raise ValueError("not an object")
            except ValueError:
                close_fds(fds)
                log.error("a guard message is not a JSON object; it is dropped")
                continue
            ask_id = message.get("re")
            if ask_id is not None:
                answer = self._asks.get(ask_id)
                if answer is not None and not answer.done():
                    answer.set_result((message, fds))
                else:
                    close_fds(fds)
                continue
            try:
                self._on_message(message, fds)
            except Exception:
                log.exception("a guard message could not be handled: %.200r", message)


def close_fds(fds: list[int]) -> None:
    """Close sockets that came with a message and were not kept."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
