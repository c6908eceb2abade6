"""The message bus between the nodes of a cluster, as the rest of the cluster code sees it.

Three things are asked of a bus: request-reply to one subscriber with a deadline (a call
routed to its task's owner), fire-and-forget publish to every subscriber (a task ended, a
task changed owner), and a clear difference between "nobody listens there" (the owner is
gone: no point in waiting) and "nobody answered in time". A request ends only with a reply
its sender accepts (the owner's, sealed): a reply that is not is set aside and the wait goes
on, so whoever answers first does not decide what the sender is told. NATS is the one
shipped (`nats_bus.py`); another (Redis streams, say) implements this protocol and nothing
else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

# A request handler returns the reply's bytes; a broadcast handler returns None.
Handler = Callable[[bytes], Awaitable[bytes | None]]
# What a requester makes of a reply: its meaning, or None for a reply it does not accept.
Accept = Callable[[bytes], T | None]


class BusError(Exception):
    """The bus could not carry a message."""


class NoResponder(BusError):
    """Nobody subscribes to the subject now: the node it names is not connected."""


class BusTimeout(BusError):
    """A request was delivered, or queued, but no reply it accepts came before its deadline;
    `refused` counts the replies that came and were not accepted."""

    def __init__(self, subject: str, refused: int = 0) -> None:
        super().__init__(subject)
        self.refused = refused


class Bus(Protocol):
    async def request(self, subject: str, data: bytes, timeout_s: float, accept: Accept[T]) -> T:
        """Send to one subscriber of `subject` and wait for the first reply `accept` makes
        something of; raises `NoResponder`, `BusTimeout` or `BusError`."""
        ...

    async def publish(self, subject: str, data: bytes) -> None:
        """Send to every subscriber of `subject` now connected; nothing is waited for."""
        ...

    async def subscribe(self, subject: str, handler: Handler) -> None:
        """Run `handler` for every message on `subject`, replying with what it returns."""
        ...

    async def close(self) -> None: ...
