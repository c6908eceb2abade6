"""The warm stock: never-used browser contexts kept ready, so a task's first call does not
wait for a context to open.

A context is taken from the stock at most once, by one task; a signed-in task or one that
records a video opens a context of its own instead (the pool decides). The stock is
refilled after a hand-off, once no task's browser has been busy for a moment, one context
at a time, within the pool's bound on contexts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from .processes import BrowserProcess
from .session import BrowserSession

log = logging.getLogger(__name__)

# The warm stock is refilled a moment after a hand-off, not during it: opening a context
# right away would take CPU from the task that just started.
WARM_REFILL_DELAY_S = 1.0
# ...and then one context at a time, each once no task's browser has been busy for a
# moment. Measured with 8 tasks doing navigate + snapshot + click on 2 cores: refilling 8
# contexts during their calls tripled the renderers' CPU time and doubled the calls' p50.
# Under load that never pauses, a context is still opened every few seconds, so the stock
# does not stay empty for good.
WARM_REFILL_QUIET_S = 0.25
WARM_REFILL_MAX_WAIT_S = 5.0
_QUIET_POLL_S = 0.05


class WarmStock:
    """Up to `target` never-used contexts, opened with `open_fresh` while `room()` says
    the pool's bound leaves room for one more, and `quiet_for()` (seconds since a task's
    browser last ran a call) says the browsers are quiet."""

    def __init__(
        self,
        target: int,
        open_fresh: Callable[[], Awaitable[BrowserSession]],
        room: Callable[[], bool],
        quiet_for: Callable[[], float],
        close_later: Callable[[BrowserSession, str], None],
    ) -> None:
        self.target = target
        self.sessions: list[BrowserSession] = []
        self._open_fresh = open_fresh
        self._room = room
        self._quiet_for = quiet_for
        self._close_later = close_later
        self._warming: asyncio.Task[None] | None = None
        self._closing = False

    def __len__(self) -> int:
        return len(self.sessions)

    def take(self) -> BrowserSession | None:
        """A never-used context on a live process, or None when the stock holds none."""
        while self.sessions:
            session = self.sessions.pop(0)
            if session.lost is None and session.process.alive:
                return session
            self._close_later(session, "its browser process ended")
        return None

    def handed_off(self) -> None:
        """A task got its context: the stock is refilled a moment later."""
        self.refill(delay=WARM_REFILL_DELAY_S)

    def refill(self, delay: float = 0.0) -> None:
        if self.target == 0 or self._closing:
            return
        if self._warming is None or self._warming.done():
            self._warming = asyncio.ensure_future(self._fill(delay))

    async def stocked(self) -> int:
        """Wait for the refill in progress; returns how many contexts the stock holds."""
        if self._warming is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._warming)
        return len(self.sessions)

    def process_died(self, process: BrowserProcess) -> None:
        """The contexts of a process that died are closed, and others opened instead."""
        for session in [s for s in self.sessions if s.process is process]:
            self.sessions.remove(session)
            self._close_later(session, "its browser process ended")
        self.refill()

    def close(self) -> list[BrowserSession]:
        """Stop refilling; returns the contexts held, for the pool to close."""
        self._closing = True
        if self._warming is not None:
            self._warming.cancel()
        sessions, self.sessions = self.sessions, []
        return sessions

    async def _fill(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        while self._wanted():
            await self._until_quiet()
            if not self._wanted():
                return
            try:
                self.sessions.append(await self._open_fresh())
            except Exception as exc:
                log.warning("the warm browser stock could not be refilled: %r", exc)
                return

    def _wanted(self) -> bool:
        return not self._closing and len(self.sessions) < self.target and self._room()

    async def _until_quiet(self) -> None:
        give_up = time.monotonic() + WARM_REFILL_MAX_WAIT_S
        while time.monotonic() < give_up:
            if self._quiet_for() >= WARM_REFILL_QUIET_S:
                return
            await asyncio.sleep(_QUIET_POLL_S)
