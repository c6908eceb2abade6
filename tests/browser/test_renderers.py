"""What a task's navigations cost its Chromium in processes: none started for nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.browser.memory import renderers
from tests.browser.conftest import Sites, browser_gateway

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def test_navigating_within_the_app_starts_no_renderer_beside_the_warm_stock(
    tmp_path: Path, sites: Sites
) -> None:
    # The gateway's own Chromium, as deployed: jailed, with contexts waiting warm beside the
    # task's (each a browser context of its own, as the task's is).
    async with browser_gateway(
        tmp_path, sites, browser_warm_contexts=2, browser_launch_at_start=True
    ) as b:
        pool = b.pool
        task = await b.task()
        assert (await b.call(task, "browser.navigate", url="/")).ok
        assert await pool.stocked() == 2  # refilled after the hand-off
        [process] = pool.processes.live()
        assert process.pid is not None
        before = set(renderers(process.pid))
        assert before  # the task's page and the warm contexts' pages have theirs
        for _ in range(4):
            assert (await b.call(task, "browser.navigate", url="/")).ok
        # A renderer started for a navigation is up before the navigation's commit; the
        # pause only lets one that was ended leave /proc.
        await asyncio.sleep(0.5)
        # The page's renderer serves every navigation within its site; no process was
        # started in advance for a navigation, and none ended.
        assert set(renderers(process.pid)) == before
