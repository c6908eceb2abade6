"""The origin guard's boundary: a filtering HTTP proxy on loopback, one per task context.

Chromium sends every request of a context through it (Playwright's per-context `proxy`
option, with loopback not exempt), redirect hops and popups included, which a Playwright
route handler does not see. A plain HTTP request is forwarded only when its exact origin
is one of the task's; a CONNECT (HTTPS, and websockets, which Chromium always tunnels) only
to an allowed host and port. Everything else is answered here, never forwarded, and
reported to `on_block`, so the foreign server never receives a byte.

Each client connection carries one request, answered with `Connection: close`: a client
connection can then never carry a second, unchecked request. Upstream, connections are kept
alive per origin (`upstream.py`: the proxy is one task's, so the pool is per task and
origin): a page's first load of dozens of resources reuses a few connections instead of
opening one per request. A response goes back to the browser with the upstream's own
framing (its length or its chunks), and the connection is reused only when that framing
marks where the response ends.

An allowed origin may be routed (`route`): its upstream connection is then opened by the
route's opener (a provisioned sandbox's app on its unix socket, gateway/browser/app_link.py)
instead of a TCP connection, plain requests and tunnels alike; nothing resolves its name.
Which origins are forwarded at all is still `allow`'s one rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from gateway.core.origins import OriginError, origin_of

from .app_link import Opener
from .guards import BlockedRequest, GuardCounts
from .http_relay import (
    HOP_BY_HOP,
    MAX_HEAD_BYTES,
    parse_head,
    partial,
    pipe_both,
    relay_body,
    relay_response,
)
from .jail_routes import GUARD_PORT, JailRoutes
from .upstream import Upstreams

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
_METHOD = re.compile(r"^[A-Z]{1,16}$")


def authority_of(origin: str) -> tuple[str, int]:
    """`http://127.0.0.1:8001` -> ("127.0.0.1", 8001), default ports filled in."""
    parts = urlsplit(origin)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal: keep the brackets, as a CONNECT target spells it
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return host, port


def _connect_authority(target: str) -> tuple[str, int] | None:
    """A CONNECT target `host:port`, normalized the way origins are, or None when odd."""
    if not target or "/" in target or "@" in target:
        return None
    try:
        host, port = authority_of(origin_of(f"https://{target}"))
    except (OriginError, ValueError):
        return None
    # `host` without a port would default to 443; a CONNECT must name its port.
    if not target.rsplit("]", 1)[-1].count(":"):
        return None
    return host, port


def _is_navigation(headers: dict[str, str]) -> bool:
    # Chromium marks a document request by Sec-Fetch-Dest when the origin is potentially
    # trustworthy, and by Upgrade-Insecure-Requests on every navigation.
    dest = headers.get("sec-fetch-dest", "")
    if dest:
        return dest in ("document", "iframe", "frame")
    return headers.get("sec-fetch-mode") == "navigate" or "upgrade-insecure-requests" in headers


class OriginProxy:
    """A loopback HTTP proxy that forwards only to the origins it is told to allow."""

    def __init__(
        self,
        on_block: Callable[[BlockedRequest], None],
        *,
        host: str = "127.0.0.1",
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._on_block = on_block
        self._on_close = on_close
        self._host = host
        self._allowed: frozenset[str] = frozenset()
        self._authorities: frozenset[tuple[str, int]] = frozenset()
        self._routes: dict[tuple[str, int], Opener] = {}
        self._server: asyncio.Server | None = None
        self._jailed: tuple[JailRoutes, str] | None = None
        self._url: str | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.forwarded = 0
        self.blocked = 0
        self._upstreams = Upstreams(self._upstream)

    @property
    def allowed(self) -> frozenset[str]:
        return self._allowed

    @property
    def opened(self) -> int:
        """Upstream connections opened so far."""
        return self._upstreams.opened

    @property
    def kept(self) -> int:
        """Upstream connections kept open, idle, for the next request."""
        return self._upstreams.idle_count()

    def allow(self, origins: frozenset[str]) -> None:
        """Set the origins to forward to (a warm context starts with none)."""
        self._allowed = frozenset(origins)
        self._authorities = frozenset(authority_of(o) for o in origins)
        self._upstreams.keep_only(self._authorities)

    def route(self, origin: str, opener: Opener) -> None:
        """Reach `origin` through `opener` instead of a TCP connection (it is still forwarded
        only while it is allowed). Connections kept to it before lead elsewhere: closed."""
        authority = authority_of(origin)
        self._routes[authority] = opener
        self._upstreams.drop(authority)

    async def _upstream(
        self, authority: tuple[str, int]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        opener = self._routes.get(authority)
        if opener is not None:
            return await asyncio.wait_for(opener(), CONNECT_TIMEOUT_S)
        return await asyncio.wait_for(
            asyncio.open_connection(authority[0].strip("[]"), authority[1]), CONNECT_TIMEOUT_S
        )

    async def start(self) -> str:
        """Listen on a port of the gateway's loopback (a browser outside any jail)."""
        self._server = await asyncio.start_server(self._accept, self._host, 0, limit=MAX_HEAD_BYTES)
        port = self._server.sockets[0].getsockname()[1]
        self._url = f"http://{self._host}:{port}"
        return self._url

    def attach(self, routes: JailRoutes, address: str, pid: int | None) -> str:
        """Answer at `address` of the jail of browser `pid` (None: any jail) among the
        jails `routes` serves, instead of listening."""
        routes.add(address, self._accept, pid)
        self._jailed = (routes, address)
        self._url = f"http://{address}:{GUARD_PORT}"
        return self._url

    async def synced(self) -> None:
        """What `allow` and `route` said holds for the next connection (at once, here)."""

    async def counts(self) -> GuardCounts:
        return self.tally()

    def tally(self) -> GuardCounts:
        """What it has done so far (`counts`, without a wait)."""
        return GuardCounts(
            forwarded=self.forwarded, blocked=self.blocked, opened=self.opened, kept=self.kept
        )

    @property
    def url(self) -> str:
        """The proxy as the browser's context names it."""
        assert self._url is not None, "the proxy is not started"
        return self._url

    async def close(self) -> None:
        if self._jailed is not None:
            routes, address = self._jailed
            routes.remove(address)
            self._jailed = None
        if self._on_close is not None:
            self._on_close()
            self._on_close = None
        if self._server is not None:
            self._server.close()
        self._upstreams.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    # -- connections --------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # a proxy connection must never take the gateway down
            log.exception("origin proxy connection failed")
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, "Request Header Fields Too Large")
            return
        request_line, headers, raw_headers = parse_head(head)
        parts = request_line.split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
            await _answer(writer, 400, "Bad Request")
            return
        method, target, _version = parts
        if not _METHOD.match(method):
            # Not an HTTP request at all: a WebRTC or TURN client's binary framing that
            # reached the guard's port. Nothing of it is forwarded or recorded as a page's.
            await _answer(writer, 400, "Bad Request")
            return
        if method == "CONNECT":
            await self._tunnel(target, reader, writer)
        else:
            await self._forward(method, target, headers, raw_headers, reader, writer)

    def _block(self, target: str, method: str, navigation: bool) -> None:
        self.blocked += 1
        blocked = BlockedRequest(
            target=target[:2048], method=method, navigation=navigation, at=time.time()
        )
        try:
            self._on_block(blocked)
        except Exception:
            log.exception("the origin proxy's block listener failed")

    async def _tunnel(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        authority = _connect_authority(target)
        if authority is None or authority not in self._authorities:
            self._block(target, "CONNECT", navigation=False)
            await _answer(writer, 403, "Forbidden")
            return
        try:
            up_reader, up_writer = await self._upstream(authority)
        except (OSError, TimeoutError):
            await _answer(writer, 502, "Bad Gateway")
            return
        self.forwarded += 1
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await writer.drain()
        try:
            await pipe_both(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _forward(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        raw_headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        navigation = _is_navigation(headers)
        parts = urlsplit(target)
        try:
            origin = origin_of(target) if parts.scheme.lower() == "http" else None
        except OriginError:
            origin = None
        if origin is None or origin not in self._allowed:
            self._block(target, method, navigation)
            # A navigation answered 204 is not committed: the page stays where it was.
            # Anything else gets a plain refusal.
            if navigation:
                await _answer(writer, 204, "No Content")
            else:
                await _answer(writer, 403, "Forbidden")
            return
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc.rsplit('@', 1)[-1]}"]
        for name, value in raw_headers:
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered == "host":
                continue
            lines.append(f"{name}: {value}")
        request_head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        # A request with a body streams it from the browser as it goes: it could not be
        # sent again on a fresh connection, so it never goes out on a kept one.
        has_body = "transfer-encoding" in headers or headers.get("content-length", "0") not in (
            "",
            "0",
        )
        authority = authority_of(origin)
        self.forwarded += 1
        retried = False
        while True:
            try:
                upstream = await self._upstreams.take(authority, fresh=has_body or retried)
            except (OSError, TimeoutError):
                await _answer(writer, 502, "Bad Gateway")
                return
            try:
                upstream.writer.write(request_head)
                await relay_body(headers, reader, upstream.writer)
                await upstream.writer.drain()
                head = await upstream.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                upstream.close()
                # A kept connection the upstream closed just as it was reused: nothing of
                # the request was answered, so it goes again on a fresh one.
                if upstream.reused and not retried and not partial(exc):
                    retried = True
                    continue
                raise
            except BaseException:
                upstream.close()
                raise
            break
        try:
            reusable = await relay_response(method, head, upstream.reader, writer)
        except BaseException:
            upstream.close()
            raise
        if reusable:
            self._upstreams.give_back(authority, upstream)
        else:
            upstream.close()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = (
        b""
        if status == 204
        else f"{status} {reason}: refused by the task's origin guard\n".encode()
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
