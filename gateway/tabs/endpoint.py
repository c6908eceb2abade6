"""`WS /v1/tabs`: the Starlette websocket adapter around the tab channel.

The handshake is refused (HTTP 403, before any accept) unless the `Origin` header is one of
the configured dashboard origins: a page on any other site cannot ride the user's browser
into the channel. The tab token comes in the first frame, a `hello`, within a few seconds;
anything in the URL is ignored (a query string ends up in logs). After the hello, a reader
loop hands every frame to the hub and a writer task sends what the hub queued, in order; a
tab that stops taking frames is dropped after `TabConfig.write_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import PydanticSerializationError, to_json
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.core.errors import AuthError, GatewayError
from gateway.core.origins import origin_allowed
from gateway.core.ports import TaskLookup
from gateway.core.tokens import Purpose
from gateway.tabs import frames
from gateway.tabs.hub import TabHub
from gateway.tabs.link import CloseCommand, Outgoing, TabLink, Writer

log = logging.getLogger(__name__)


async def _refuse(ws: WebSocket, hub: TabHub, reason: str, code: str, message: str) -> None:
    hub.refuse(reason)
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps(frames.error(code, message)))
        await ws.close(frames.CLOSE_POLICY, reason)


async def _first_frame(ws: WebSocket, hub: TabHub) -> str | None:
    try:
        message = await asyncio.wait_for(ws.receive(), hub.config.hello_timeout_s)
    except TimeoutError:
        await _refuse(ws, hub, "hello_timeout", "invalid_frame", "no hello within the time allowed")
        return None
    if message["type"] == "websocket.disconnect":
        return None
    text = message.get("text")
    if text is None:
        await _refuse(ws, hub, "invalid_hello", "invalid_frame", "the hello must be JSON text")
        return None
    if len(text.encode()) > hub.config.limits.max_frame_bytes:
        hub.refuse("too_large")
        with contextlib.suppress(Exception):
            await ws.close(frames.CLOSE_TOO_LARGE, "frame too large")
        return None
    return str(text)


def endpoint(
    hub: TabHub,
    tasks: TaskLookup,
    dashboard_origins: list[str],
    *,
    take: Callable[[str], Awaitable[None]] | None = None,
) -> Callable[[WebSocket], Awaitable[None]]:
    """The `/v1/tabs` websocket. `take`, on a node of a cluster: the node becomes the
    owner of a task whose tab connects to it (gateway/cluster)."""

    async def tabs(ws: WebSocket) -> None:
        if not origin_allowed(ws.headers.get("origin"), dashboard_origins):
            hub.refuse("origin")
            # Closing before accept makes the server answer the handshake with 403.
            await ws.close(frames.CLOSE_POLICY)
            return
        await ws.accept()
        text = await _first_frame(ws, hub)
        if text is None:
            return
        try:
            hello = frames.parse_hello(json.loads(text))
        except (ValueError, RecursionError) as exc:
            await _refuse(ws, hub, "invalid_hello", "invalid_frame", str(exc))
            return
        try:
            identity, claims = await tasks.authenticate_claims(hello.token, Purpose.TAB)
        except AuthError as exc:
            await _refuse(ws, hub, "auth", str(exc.code), exc.message)
            return
        if take is not None:
            try:
                await take(identity.task_id)
            except GatewayError as exc:
                await _refuse(ws, hub, "unavailable", str(exc.code), exc.message)
                return
        link = hub.attach(identity, hello, claims.expires_at, _writer(ws))
        writer = asyncio.create_task(_write(link, hub.config.write_timeout_s))
        reader = asyncio.create_task(_read(ws, hub, link))
        try:
            # The writer ends when a close was sent or the tab stopped taking frames; either
            # way the connection is over, even if the tab never sends another byte.
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            finally:
                hub.detach(link)
                if not writer.done():
                    # Let the writer flush what the detach queued (a bye, a close), briefly.
                    link.push(CloseCommand(1000, "closed"))
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                        await asyncio.wait_for(writer, 2)

    return tabs


async def _read(ws: WebSocket, hub: TabHub, link: TabLink) -> None:
    # When the writer closes the socket (a close effect), the peer's close answer arrives
    # here as a disconnect, which ends the loop.
    while True:
        try:
            message = await ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("text")
        hub.receive(link, data if data is not None else message.get("bytes") or b"")


def encode(frame: dict[str, Any]) -> str:
    """A frame as compact JSON text."""
    try:
        return to_json(frame).decode()
    except PydanticSerializationError:
        # A lone surrogate (text that came in as JSON `\ud800`) has no UTF-8 form; JSON's
        # escapes carry it, as they did when it came in.
        return json.dumps(frame, separators=(",", ":"))


def _writer(ws: WebSocket) -> Writer:
    async def write(item: Outgoing) -> bool:
        """Send one frame; a close command ends the connection (returns False). How long
        a write may wait for the socket is its caller's to bound (`TabLink.flush`)."""
        try:
            if isinstance(item, CloseCommand):
                if ws.client_state is WebSocketState.CONNECTED:
                    await ws.close(item.code, item.reason)
                return False
            await ws.send_text(encode(item))
            return True
        except (WebSocketDisconnect, RuntimeError, OSError):
            return False
        except Exception:
            log.exception("sending to a tab failed")
            return False

    return write


async def _write(link: TabLink, write_timeout_s: float) -> None:
    """Flush the outbox whenever something is queued, until the connection is done; a tab
    that has not taken a frame within `write_timeout_s` is not reading, and is dropped."""
    while not link.done:
        await link.wake.wait()
        link.wake.clear()
        await link.flush(write_timeout_s)
