"""Which Host and Origin headers the gateway answers: its DNS-rebinding guard.

A page on an attacker's domain that re-points its DNS name at the gateway still sends its
own name in `Host`, so every route (HTTP and websocket) answers only the names the gateway
is known by: its own (`public_url`, else `host:port`) and loopback, or exactly
`GATEWAY_ALLOWED_HOSTS` when that is set (`GATEWAY_MCP_ALLOWED_HOSTS`, its first name,
is still read). The MCP door also refuses a browser `Origin` it was not told about
(agents using an MCP client send none).

Entries of the allowed-hosts list: `name` (that name on the scheme's default port, as a
proxy in front usually forwards it), `name:port`, `name:*` (any port), or `*` (no Host
check, for a proxy that already enforces it). Comparison is exact after lowercasing: no
prefix or suffix matching, so `127.0.0.1:80.evil.example` matches nothing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import Forbidden
from gateway.core.origins import OriginError, normalize_origin, origin_allowed
from gateway.http.edge import error_response
from gateway.settings import Settings

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOOPBACK_ORIGIN = re.compile(r"http://(?:localhost|127\.0\.0\.1|\[::1\])(?::[1-9][0-9]{0,4})?")
ANY = "*"


class MisdirectedHost(Forbidden):
    """A Host header the door does not answer (421, as for a request sent to the wrong server)."""

    http_status = 421


def split_host(value: str) -> tuple[str, str | None]:
    """`Example.com:8000` -> (`example.com`, `8000`); `[::1]` keeps its brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        name, rest = value[: end + 1], value[end + 1 :]
        return name, rest[1:] if rest.startswith(":") else None
    name, sep, port = value.rpartition(":")
    if not sep:
        return value, None
    return name, port


@dataclass(frozen=True)
class HostPolicy:
    hosts: frozenset[str]  # "name", "name:port" or "name:*"; ANY disables the check
    origins: frozenset[str]  # normalized origins; ANY disables the check
    loopback_origins: bool = False  # also http://localhost, 127.0.0.1 and [::1], any port

    @classmethod
    def from_settings(cls, settings: Settings) -> HostPolicy:
        named = [*settings.allowed_hosts, *settings.mcp_allowed_hosts]
        hosts = {h.strip().lower() for h in named if h.strip()}
        if not hosts:
            hosts = set(_defaults(settings))
        origins: set[str] = set()
        for value in settings.mcp_allowed_origins:
            if value.strip() == ANY:
                origins.add(ANY)
                continue
            try:
                origins.add(normalize_origin(value))
            except OriginError as exc:
                raise ValueError(f"GATEWAY_MCP_ALLOWED_ORIGINS: {exc}") from exc
        # A wildcard bind address has no origin of its own.
        with contextlib.suppress(OriginError):
            origins.add(normalize_origin(settings.base_url))
        # A gateway on loopback answers pages of loopback origins (a local agent's own UI),
        # as the MCP transport's guidance for local servers has it; a rebinding attacker's
        # page has its own name in its origin, never these.
        local = settings.host in LOOPBACK_HOSTS and not settings.mcp_allowed_origins
        return cls(frozenset(hosts), frozenset(origins), loopback_origins=local)

    def host_allowed(self, host: str | None) -> bool:
        if ANY in self.hosts:
            return True
        if not host:
            return False
        name, port = split_host(host)
        if port is None:
            return name in self.hosts
        if not port.isdigit():
            return False
        return f"{name}:{port}" in self.hosts or f"{name}:*" in self.hosts

    def check_origin(self, origin: str | None) -> None:
        """An MCP request's Origin: none (an agent), or exactly one the door was told of."""
        if origin is None or ANY in self.origins or origin_allowed(origin, self.origins):
            return
        if self.loopback_origins and LOOPBACK_ORIGIN.fullmatch(origin):
            return
        raise Forbidden("requests from that Origin are refused; see GATEWAY_MCP_ALLOWED_ORIGINS")


class HostGuard:
    """ASGI middleware: a request (or websocket handshake) for a Host this gateway is not
    known by is answered 421 (refused before accept, for a websocket), and goes no further."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        if self.policy.host_allowed(host):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        refusal = MisdirectedHost(
            "this gateway does not answer for that Host; see GATEWAY_ALLOWED_HOSTS"
        )
        await error_response(refusal)(scope, receive, send)


def _defaults(settings: Settings) -> Iterable[str]:
    for name in LOOPBACK_NAMES:
        yield name
        yield f"{name}:*"
    parts = urlsplit(settings.base_url)
    if parts.hostname and parts.hostname not in ("0.0.0.0", "::"):  # noqa: S104 - compared, not bound
        name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        default_port = {"http": 80, "https": 443}.get(parts.scheme)
        port = parts.port or default_port
        yield f"{name}:{port}"
        if port == default_port:
            yield name
