"""The bus over NATS (the `nats-py` client): core request-reply and publish, no JetStream.

The client reconnects by itself for as long as the node runs, so a restarted NATS server
costs the calls made while it was away (they fail `unavailable`, retryable) and nothing
else. NATS tells a requester at once when no subscriber is there ("no responders"), which
is how a node learns that a task's owner has gone before the owner's beats run out.

A node connects as its own NATS user (`subjects.permissions`) and reads its replies under
an inbox prefix of its own, on one subscription for all its requests. Each request waits
there for the first reply its sender accepts; replies it does not accept are counted and
dropped, and the wait goes on. A "no responders" status is believed: only the server, and
a node that received the request, may publish to a node's inbox.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import NO_RESPONDERS_STATUS, Client
from nats.errors import ConnectionClosedError, OutboundBufferLimitError
from nats.js.api import Header

from .bus import Accept, BusError, BusTimeout, Handler, NoResponder, T

log = logging.getLogger(__name__)

# How long a node waits between reconnect attempts (NATS adds its own jitter).
RECONNECT_WAIT_S = 0.25


@dataclass
class _Waiting:
    """One request waiting for a reply its sender accepts."""

    subject: str
    accept: Accept[Any]
    future: asyncio.Future[Any] = field(default_factory=asyncio.Future)
    refused: int = 0


class NatsBus:
    def __init__(self, client: Client, closing: asyncio.Event, reply_prefix: str) -> None:
        self._client = client
        self._closing = closing  # set when the node closes the bus itself: not worth a warning
        self._handlers: set[asyncio.Task[None]] = set()
        self._reply_prefix = reply_prefix
        self._waiting: dict[str, _Waiting] = {}

    @classmethod
    async def connect(
        cls,
        url: str,
        name: str,
        *,
        user: str | None = None,
        password: str | None = None,
        inbox_prefix: str = "_INBOX",
    ) -> NatsBus:
        closing = asyncio.Event()

        async def disconnected() -> None:
            if not closing.is_set():
                log.warning("cluster bus: disconnected from NATS; reconnecting")

        async def reconnected() -> None:
            log.info("cluster bus: connected to NATS again")

        async def error(exc: Exception) -> None:
            log.info("cluster bus: %r", exc)

        credentials: dict[str, Any] = {}
        if user is not None:
            credentials = {"user": user, "password": password}
        try:
            client = await nats.connect(
                url,
                name=name,
                inbox_prefix=inbox_prefix,
                **credentials,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_S,
                connect_timeout=5,
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
                error_cb=error,
            )
        except Exception as exc:  # the client raises several kinds on a failed first connect
            raise BusError(f"cannot reach NATS at {_shown(url)}: {exc}") from exc
        bus = cls(client, closing, f"{inbox_prefix}.{secrets.token_hex(8)}")
        try:
            # One subscription for the replies to every request; the client subscribes
            # again by itself after a reconnect.
            await client.subscribe(f"{bus._reply_prefix}.*", cb=bus._on_reply)
        except Exception as exc:
            await client.close()
            raise BusError(f"cannot subscribe to the replies on NATS: {exc!r}") from exc
        return bus

    async def request(self, subject: str, data: bytes, timeout_s: float, accept: Accept[T]) -> T:
        if not self._client.is_connected:
            # While reconnecting, the client would hold the request until its deadline;
            # the caller is better told at once that the bus is down.
            raise BusError("the cluster bus is reconnecting")
        token = secrets.token_hex(8)
        waiting = _Waiting(subject, accept)
        self._waiting[token] = waiting
        try:
            await self._client.publish(subject, data, reply=f"{self._reply_prefix}.{token}")
            value: T = await asyncio.wait_for(waiting.future, timeout_s)
            return value
        except TimeoutError:
            raise BusTimeout(subject, waiting.refused) from None
        except (ConnectionClosedError, OutboundBufferLimitError) as exc:
            raise BusError(f"the cluster bus could not send: {exc!r}") from exc
        finally:
            del self._waiting[token]
            if not waiting.future.done():
                waiting.future.cancel()

    async def _on_reply(self, msg: Any) -> None:
        waiting = self._waiting.get(str(msg.subject).rpartition(".")[2])
        if waiting is None or waiting.future.done():
            return  # a reply to a request no longer waiting, or after the accepted one
        if msg.headers and msg.headers.get(Header.STATUS) == NO_RESPONDERS_STATUS:
            waiting.future.set_exception(NoResponder(waiting.subject))
            return
        try:
            value = waiting.accept(bytes(msg.data))
        except Exception:
            log.exception("cluster bus: reading a reply failed")
            value = None
        if value is None:
            waiting.refused += 1
            return
        waiting.future.set_result(value)

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


def _shown(url: str) -> str:
    """The URL without a password it may carry."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=f"{parts.username}:***@{parts.hostname}:{parts.port}").geturl()
