"""A task's first call and the time its context takes to open, on real Chromium: a call
does not spend its deadline waiting for a context that opens too slowly. It ends
`unavailable`/`overloaded`, nothing done, while the context goes on opening for the
task's next call, which gets it (one context, not two)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.browser import BrowserProcesses
from gateway.browser.session import BrowserSession
from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus
from tests.browser.conftest import Sites, browser_gateway, task_chromium

__all__ = ["task_chromium"]

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

BOUND_S = 60.0  # only a gateway that waits out the call's whole deadline reaches it


async def test_a_call_is_turned_away_while_its_context_is_still_opening(
    tmp_path: Path,
    sites: Sites,
    task_chromium: BrowserProcesses,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entered, released = asyncio.Event(), asyncio.Event()
    original = BrowserSession.open.__func__  # type: ignore[attr-defined]

    async def slow_open(cls: type[BrowserSession], *args: Any, **kwargs: Any) -> Any:
        # Chromium under load: the context takes as long as the test says to open.
        entered.set()
        await released.wait()
        return await original(cls, *args, **kwargs)

    monkeypatch.setattr(BrowserSession, "open", classmethod(slow_open))
    async with browser_gateway(tmp_path, sites, task_chromium) as b:
        identity = await b.task()
        pool = b.pool
        shed_before = pool.starts.shed
        async with asyncio.timeout(BOUND_S):
            with pytest.raises(ToolFailure) as refused:
                await pool.session_for(identity, time_left=2.0)
        assert entered.is_set()
        assert refused.value.tool_status is ToolStatus.UNAVAILABLE
        assert refused.value.code == ErrorCode.OVERLOADED
        assert refused.value.retryable
        assert (refused.value.details or {}).get("retry_after_s", 0) >= 1
        assert "nothing was done" in refused.value.message
        assert pool.starts.shed == shed_before + 1
        assert pool.live_count() == 0

        released.set()
        # The opening went on: the task's next call gets that context, and no other.
        session = await pool.session_for(identity, time_left=BOUND_S)
        assert session.identity == identity
        assert pool.live_count() == 1
        assert await pool.session_for(identity, time_left=BOUND_S) is session
