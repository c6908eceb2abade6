"""A page that floods the guard with refused requests: every refusal is accounted for in a
few aggregate records, instead of one row each, and the task's calls stay recorded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.browser.conftest import BrowserGateway

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

IMAGES = 3000


async def test_thousands_of_refused_loads_make_a_few_records(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    page = await browsers.call(task, "browser.navigate", url=f"/flood?n={IMAGES}", snapshot=False)
    assert page.ok, page
    refused = 0
    records: list[dict[str, Any]] = []
    for _ in range(600):  # the requests reach the guard over seconds; windows close after 2 s
        records = [
            r
            for r in await browsers.gw.store.evidence_for(task.org_id, task.task_id)
            if r["kind"] == "origin_blocked"
        ]
        refused = sum(r["data"]["count"] if r["data"].get("aggregate") else 1 for r in records)
        if refused >= IMAGES:
            break
        await asyncio.sleep(0.05)
    assert refused >= IMAGES
    assert len(records) <= 60, len(records)
    assert browsers.sites.log.requests == []
    calls = [
        r
        for r in await browsers.gw.store.evidence_for(task.org_id, task.task_id)
        if r["kind"] == "call"
    ]
    assert [c["tool"] for c in calls] == ["browser.navigate"]
