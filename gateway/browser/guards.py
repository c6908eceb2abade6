"""A task context's guard as the rest of the browser sees it, wherever it runs.

The session holds a `ContextGuard`: the proxy its context is told to use, the origins it
lets out, what it refused (`BlockedRequest`, told to the page-side guard) and what it has
done (`GuardCounts`). `guard_proxy.OriginProxy` is one on the gateway's event loop;
`guard_process.WorkerGuard` is one served by the guard's own process.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from .app_link import Opener


@dataclass(frozen=True)
class BlockedRequest:
    """One request the proxy refused: what was asked for, and whether it was a navigation."""

    target: str  # the URL of a plain request, or `host:port` of a CONNECT
    method: str
    navigation: bool
    at: float


@dataclass(frozen=True)
class GuardCounts:
    """What one context's guard has done so far."""

    forwarded: int  # requests and tunnels let out
    blocked: int  # requests and tunnels refused
    opened: int  # upstream connections opened
    kept: int  # upstream connections kept open, idle, for the next request


class ContextGuard(Protocol):
    """One task context's guard, wherever it runs (here, or in the guard process): the
    proxy its context is told to use, and what it lets out."""

    @property
    def url(self) -> str: ...

    @property
    def allowed(self) -> frozenset[str]: ...

    def allow(self, origins: frozenset[str]) -> None:
        """Set the origins to forward to (a warm context starts with none)."""
        ...

    def route(self, origin: str, opener: Opener) -> None:
        """Reach `origin` through `opener` instead of a TCP connection (it is still
        forwarded only while it is allowed)."""
        ...

    async def synced(self) -> None:
        """Wait until what `allow` and `route` said holds for the next connection."""
        ...

    async def counts(self) -> GuardCounts: ...

    async def close(self) -> None: ...


Record = TypeVar("Record", BlockedRequest, GuardCounts)


def from_message(kind: type[Record], message: dict[str, Any]) -> Record:
    """A record of `kind` from a message that carries its fields (`dataclasses.asdict`)."""
    return kind(**{f.name: message[f.name] for f in fields(kind)})
