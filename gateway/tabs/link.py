"""One authenticated tab connection as the hub sees it: its outbox and the one flush that
writes it, in order."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.identity import TaskIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CloseCommand:
    code: int
    reason: str


Outgoing = dict[str, Any] | CloseCommand


Writer = Callable[[Outgoing], Awaitable[bool]]


@dataclass
class TabLink:
    """One authenticated tab connection, as the hub sees it.

    Frames wait in `outbox` and are written in order by one `flush` at a time, either the
    connection's writer task's or `TabHub.send`'s own (which saves a task switch on the
    hot path). `write` is set by the endpoint and returns False once the socket is done.
    The writer task gives each frame `TabConfig.write_timeout_s` to be taken; `TabHub.send`
    waits no longer than its request's own expiry (see `TabHub._expire`).
    """

    conn_id: str
    identity: TaskIdentity
    tab_id: str
    token_expires_at: float
    outbox: deque[Outgoing] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    writing: bool = False  # a flush is under way
    write: Writer | None = None
    done: bool = False
    calls: dict[str, asyncio.Event] = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = None

    def push(self, item: Outgoing) -> None:
        self.outbox.append(item)
        self.wake.set()

    async def flush(self, write_timeout_s: float | None = None) -> None:
        """Write what waits in the outbox, in order. A flush that finds another under way
        leaves the frames to it (it writes until the outbox is empty); one that stops
        early (cancelled while the socket made it wait) is followed up by the writer task
        (whoever stopped it sets `wake`)."""
        if self.writing:
            return
        self.writing = True
        try:
            while self.outbox and not self.done and self.write is not None:
                # Taken off only once written: a write cancelled while it waits for the
                # socket leaves its frame first in line for the writer task.
                if write_timeout_s is None:
                    written = await self.write(self.outbox[0])
                else:
                    try:
                        async with asyncio.timeout(write_timeout_s):
                            written = await self.write(self.outbox[0])
                    except TimeoutError:
                        log.info("a tab stopped reading; dropping its connection")
                        written = False
                self.outbox.popleft()
                if not written:
                    self.done = True
                    self.outbox.clear()
        finally:
            self.writing = False
