"""Waiting in a test for a state the system reaches on its own (a call joining a queue, a
message heard by another node), with a bound only a broken system reaches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

# Long enough for a loaded 2-core machine; a wait that reaches it fails the test.
BOUND_S = 60.0


async def until(check: Callable[[], bool], what: str, *, bound_s: float = BOUND_S) -> None:
    """Return once `check()` is true; fail naming `what` after `bound_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.01)


async def until_true(
    check: Callable[[], Awaitable[bool]], what: str, *, bound_s: float = BOUND_S
) -> None:
    """`until` for a check that must await (a call, a query); it is asked every 0.1 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.1)
