"""Which Host and Origin headers the MCP door answers: its DNS-rebinding guard.

A page on an attacker's domain that re-points its DNS name at the gateway still sends its
own name in `Host`, so the door answers only the names it is known by: the gateway's own
(`public_url`, else `host:port`) and loopback, or exactly `GATEWAY_MCP_ALLOWED_HOSTS`
when that is set. A browser always sends `Origin` on a cross-origin POST; agents using an
MCP client send none. A present `Origin` must be one the door is told about.

Entries of the allowed-hosts list: `name` (that name on the scheme's default port, as a
proxy in front usually forwards it), `name:port`, `name:*` (any port), or `*` (no Host
check, for a proxy that already enforces it). Comparison is exact after lowercasing: no
prefix or suffix matching, so `127.0.0.1:80.evil.example` matches nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.errors import Forbidden
from gateway.origins import OriginError, normalize_origin
from gateway.settings import Settings

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
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

    @classmethod
    def from_settings(cls, settings: Settings) -> HostPolicy:
        hosts = {h.strip().lower() for h in settings.mcp_allowed_hosts if h.strip()}
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
        return cls(frozenset(hosts), frozenset(origins))

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

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None or ANY in self.origins:
            return True
        try:
            return normalize_origin(origin) in self.origins
        except OriginError:
            return False

    def check(self, host: str | None, origin: str | None) -> None:
        if not self.host_allowed(host):
            raise MisdirectedHost(
                "this gateway does not answer MCP for that Host; see GATEWAY_MCP_ALLOWED_HOSTS"
            )
        if not self.origin_allowed(origin):
            raise Forbidden(
                "requests from that Origin are refused; see GATEWAY_MCP_ALLOWED_ORIGINS"
            )


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
