"""The bus over NATS (the `nats-py` client): core request-reply and publish, no JetStream.

The client reconnects by itself for as long as the node runs, so a restarted NATS server
costs the calls made while it was away (they fail `unavailable`, retryable) and nothing
else. NATS tells a requester at once when no subscriber is there ("no responders"), which
is how a node learns that a task's owner has gone before the owner's beats run out.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import TimeoutError as NatsTimeout

from .bus import BusError, BusTimeout, Handler, NoResponder

log = logging.getLogger(__name__)

# How long a node waits between reconnect attempts (NATS adds its own jitter).
RECONNECT_WAIT_S = 0.25


class NatsBus:
    def __init__(self, client: Client, closing: asyncio.Event) -> None:
        self._client = client
        self._closing = closing  # set when the node closes the bus itself: not worth a warning
        self._handlers: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(cls, url: str, name: str) -> NatsBus:
        closing = asyncio.Event()

        async def disconnected() -> None:
            if not closing.is_set():
                log.warning("cluster bus: disconnected from NATS; reconnecting")

        async def reconnected() -> None:
            log.info("cluster bus: connected to NATS again")

        async def error(exc: Exception) -> None:
            log.info("cluster bus: %r", exc)

        try:
            client = await nats.connect(
                url,
                name=name,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_S,
                connect_timeout=5,
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
                error_cb=error,
            )
        except Exception as exc:  # the client raises several kinds on a failed first connect
            raise BusError(f"cannot reach NATS at {url}: {exc}") from exc
        return cls(client, closing)

    async def request(self, subject: str, data: bytes, timeout_s: float) -> bytes:
        if not self._client.is_connected:
            # While reconnecting, the client would hold the request until its deadline;
            # the caller is better told at once that the bus is down.
            raise BusError("the cluster bus is reconnecting")
        try:
            reply = await self._client.request(subject, data, timeout=timeout_s)
        except NoRespondersError as exc:
            raise NoResponder(subject) from exc
        except NatsTimeout as exc:
            raise BusTimeout(subject) from exc
        except (ConnectionClosedError, OutboundBufferLimitError) as exc:
            raise BusError(f"the cluster bus could not send: {exc!r}") from exc
        return bytes(reply.data)

    async def publish(self, subject: str, data: bytes) -> None:
        try:
            await self._client.publish(subject, data)
        except (ConnectionClosedError, OutboundBufferLimitError) as exc:
            raise BusError(f"the cluster bus could not send: {exc!r}") from exc

    async def subscribe(self, subject: str, handler: Handler) -> None:
        async def on_message(msg: Any) -> None:
            # Each message in a task of its own: a slow call must not hold the next one.
            task = asyncio.create_task(self._handle(handler, msg))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

        await self._client.subscribe(subject, cb=on_message)

    async def _handle(self, handler: Handler, msg: Any) -> None:
        try:
            reply = await handler(bytes(msg.data))
        except Exception:
            log.exception("cluster bus: a handler for %s failed", msg.subject)
            return
        if reply is not None and msg.reply:
            try:
                await msg.respond(reply)
            except Exception as exc:  # the requester may be gone, or the bus down
                log.info("cluster bus: a reply on %s was not sent: %r", msg.subject, exc)

    async def close(self) -> None:
        self._closing.set()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if not self._client.is_closed:
            await self._client.close()
