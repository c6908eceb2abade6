"""The upstream connections of one task's guard proxy, kept alive per origin.

A guard proxy serves one task's context, so its pool is per task and per origin by
construction: a connection opened for one task is never handed to another. A page's first
load asks for dozens of resources of the same origin; opening a connection for each one
(a TCP handshake, or a new stream to a provisioned app, and the app's accept) is what made
such loads slow. A connection goes back to the pool only after a response whose end its
framing marks (a length, chunks, or no body), and only when the upstream did not ask to
close it.

While a connection is idle, a read on it waits: bytes that arrive then (a response
nobody asked for, more than the framing said) or the upstream closing it end it for good
(closed at once, its socket not left half open), so a reused connection never carries
something that does not belong to the next request. An idle connection is also closed
after `IDLE_S`, before the usual server keep-alive
timeouts (5 s for uvicorn and Node, more for most others), so a reuse seldom meets a
connection the server has just closed; when one does, the guard opens a fresh one
(`Upstreams.take(fresh=True)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Authority = tuple[str, int]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]

IDLE_S = 4.0
# Chromium opens at most six connections per origin through a proxy at a time (and the
# guard answers each with `Connection: close`): more idle ones would never be used.
MAX_IDLE_PER_ORIGIN = 6


@dataclass(eq=False)
class Upstream:
    """One connection to an origin, and whether it came from the pool."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False
    _idle_since: float = 0.0
    _watch: asyncio.Task[None] | None = field(default=None, repr=False)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self.writer.close()


def _quiet(conn: Upstream) -> bool:
    """Nothing came on `conn` past the last answer, and the upstream has not closed it: a
    byte already buffered would be read as the next request's answer. (asyncio's reader
    has no public way to ask for its buffer's length.)"""
    buffered: bytearray = getattr(conn.reader, "_buffer", bytearray())
    return not buffered and not conn.reader.at_eof()


class Upstreams:
    """Idle connections by origin, for one guard proxy."""

    def __init__(
        self,
        open_new: Callable[[Authority], Awaitable[Streams]],
        *,
        idle_s: float = IDLE_S,
        max_idle: int = MAX_IDLE_PER_ORIGIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_new = open_new
        self._idle_s = idle_s
        self._max_idle = max_idle
        self._clock = clock
        self._idle: dict[Authority, list[Upstream]] = {}
        self.opened = 0  # connections opened, over the pool's life
        self.reused = 0  # requests that went out on a kept connection

    async def take(self, authority: Authority, *, fresh: bool = False) -> Upstream:
        """A connection to `authority`: an idle one that is still sound, else a new one."""
        if not fresh:
            idle = self._idle.get(authority)
            while idle:
                conn = idle.pop()
                watch = conn._watch
                if watch is not None and self._sound(conn):
                    # The stream takes one reader at a time: the watch must be over before
                    # the response is read. Bytes that came meanwhile still end it.
                    watch.cancel()
                    await asyncio.wait([watch])
                    # A watch cancelled before it ran, or as bytes came, saw nothing:
                    # the stream itself says whether anything came past the answer.
                    if watch.cancelled() and _quiet(conn):
                        conn._watch = None
                        conn.reused = True
                        self.reused += 1
                        return conn
                conn.close()
        self.opened += 1
        reader, writer = await self._open_new(authority)
        return Upstream(reader, writer)

    def _sound(self, conn: Upstream) -> bool:
        watch = conn._watch
        # The watch is done when bytes came or the upstream closed: either ends it.
        return (
            watch is not None
            and not watch.done()
            and not conn.writer.is_closing()
            and self._clock() - conn._idle_since < self._idle_s
        )

    def give_back(self, authority: Authority, conn: Upstream) -> None:
        """Keep `conn` for the next request to `authority` (its response is over)."""
        idle = self._idle.setdefault(authority, [])
        for stale in [c for c in idle if not self._sound(c)]:
            idle.remove(stale)
            stale.close()
        if len(idle) >= self._max_idle or conn.writer.is_closing() or not _quiet(conn):
            conn.close()
            return
        conn.reused = False
        conn._idle_since = self._clock()
        conn._watch = asyncio.ensure_future(self._watch_idle(authority, conn))
        idle.append(conn)

    async def _watch_idle(self, authority: Authority, conn: Upstream) -> None:
        """Wait on an idle connection; whatever ends the wait but its being taken (bytes,
        the upstream's close, `IDLE_S` gone by) closes it and takes it out of the pool."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.reader.read(1), self._idle_s)
        idle = self._idle.get(authority)
        if idle is not None and conn in idle:
            idle.remove(conn)
        conn._watch = None
        conn.writer.close()

    def drop(self, authority: Authority) -> None:
        """Close the idle connections to `authority` (its way there changed)."""
        for conn in self._idle.pop(authority, []):
            conn.close()

    def keep_only(self, authorities: frozenset[Authority]) -> None:
        """Close the idle connections of origins no longer allowed."""
        for authority in [a for a in self._idle if a not in authorities]:
            for conn in self._idle.pop(authority):
                conn.close()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    def idle_count(self) -> int:
        return sum(len(idle) for idle in self._idle.values())
