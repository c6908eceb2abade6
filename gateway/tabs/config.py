"""The tab channel's knobs (docs/tab-channel.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.tabs.limits import ChannelLimits


@dataclass(frozen=True)
class TabConfig:
    """Knobs of the tab channel; provide one before install to change them:
    `gw.services.provide(TabConfig, TabConfig(hello_timeout_s=2))`."""

    hello_timeout_s: float = 5.0
    request_timeout_s: float = 25.0
    # A tab that takes longer than this to accept one frame is not reading: it is dropped
    # rather than buffered for (its socket's buffers are full; ours must not grow).
    write_timeout_s: float = 10.0
    tick_s: float = 1.0
    limits: ChannelLimits = field(default_factory=ChannelLimits)
    # UI actions a tab is sent at once, and how many more may wait for one of those places;
    # past that, or when an action could not be answered before its deadline, it ends at
    # once `overloaded` (a page runs its handlers on one thread: more at once only queue
    # inside the page, out of sight of the caller's deadline).
    actions_at_once: int = 4
    actions_waiting: int = 4
