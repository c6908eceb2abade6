"""A Chromium process killed under a task: that task's call says so, retryably, its next
call gets a fresh context on the relaunched process, and the other process's task goes on."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gateway.browser import BrowserPool
from gateway.core.results import ToolStatus
from tests.browser.conftest import BrowserGateway, Sites, browser_gateway

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def two_browsers(tmp_path: Path, sites: Sites) -> AsyncIterator[BrowserGateway]:
    # Its own two Chromium processes: killing one must not disturb the other tests.
    async with browser_gateway(tmp_path, sites, browser_processes=2) as b:
        yield b


async def test_killed_browser_fails_its_task_once_then_recovers(
    two_browsers: BrowserGateway,
) -> None:
    b = two_browsers
    victim, bystander = await b.task(), await b.task()
    assert (await b.call(victim, "browser.navigate", url="/set?who=v")).ok
    assert (await b.call(bystander, "browser.navigate", url="/")).ok
    victim_session = b.pool.session(victim.task_id)
    bystander_session = b.pool.session(bystander.task_id)
    assert victim_session is not None and bystander_session is not None
    # Two tasks are spread over the two processes.
    assert victim_session.process is not bystander_session.process
    pid = victim_session.process.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await victim_session.process.died.wait()

    failed = await b.call(victim, "browser.snapshot")
    assert failed.status is ToolStatus.UNAVAILABLE
    assert failed.error is not None
    assert failed.error.code == "browser_unavailable" and failed.error.retryable

    # The other process's task never noticed.
    assert (await b.call(bystander, "browser.snapshot")).ok

    again = await b.call(victim, "browser.navigate", url="/show")
    assert again.ok, again
    fresh = b.pool.session(victim.task_id)
    assert fresh is not None and fresh is not victim_session and fresh.process.pid != pid
    # A fresh context: nothing of the lost one survived.
    assert "cookie=none" in (await b.call(victim, "browser.snapshot")).output["snapshot"]
    await b.gw.tasks.end(victim.task_id)
    await b.gw.tasks.end(bystander.task_id)
    assert b.gw.services.get(BrowserPool).live_count() == 0
