"""How much one tab connection may send and hold, and the token bucket that paces it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChannelLimits:
    max_frame_bytes: int = 64 * 1024
    max_pending: int = 64  # UI action requests awaiting this connection's reply
    max_calls: int = 16  # tool calls from the page running at once
    rate_per_s: float = 200.0  # frames a tab may send per second, on average...
    burst: int = 400  # ...and in a burst (replies to pending requests always pass)
    max_strikes: int = 10  # refused frames before the connection is closed (1008)
    heartbeat_s: float = 15.0  # a ping every heartbeat; no pong within two: dropped


@dataclass
class Bucket:
    """Frames a connection may still send now; refilled at `rate` per second of `now`."""

    rate: float
    burst: float
    tokens: float
    at: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
