"""A long task's timeline in real Chromium: a person reads a task of 20,000 records to its
last record by the "newer records" link, page by page, and goes back by "older"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from examples.synthetic_app.serve import ExampleStack, running_stack
from gateway.core.tokens import Purpose
from gateway.testing import task_body, test_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

RECORDS = 20_000


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    async with running_stack(test_settings(tmp_path / "data", example=True)) as stack:
        yield stack


async def test_a_person_reads_a_task_of_twenty_thousand_records_to_its_end(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    gw = example.gateway
    async with httpx.AsyncClient(base_url=example.gateway_url) as http:
        created = await http.post(
            "/v1/tasks",
            json=task_body(org="org_acme", actor="ada", scopes=["ui"]),
            headers={"authorization": f"Bearer {gw.settings.control_key}"},
        )
    assert created.status_code == 201, created.text
    ident = await gw.tasks.authenticate(created.json()["tokens"]["agent"], Purpose.AGENT)
    for start in range(0, RECORDS, 1000):
        await gw.store.commit(
            [gw.events.row(ident, "note", {"n": n})[1] for n in range(start, start + 1000)]
        )
    # Past the task's event quota: written as the bulk was, outside it.
    await gw.store.commit([gw.events.row(ident, "sandbox.down", {"why": "the last record"})[1]])
    stored = [
        r["seq"]
        for r in await gw.store.evidence_for(ident.org_id, ident.task_id, limit=RECORDS * 2)
    ]
    last_seq = stored[-1]

    context = await dashboard_browser.new_context(viewport={"width": 1360, "height": 900})
    page = await context.new_page()
    try:
        await page.goto(f"{example.gateway_url}/console/sign-in")
        await page.fill("#key", gw.settings.control_key or "")
        await page.click('button[type="submit"]')
        await page.wait_for_selector('[data-testid="tasks"]')
        await page.goto(f"{example.gateway_url}/console/tasks/{ident.task_id}")
        entries = page.locator('[data-testid="timeline"] li.entry')
        assert await page.locator('[data-testid="older"]').count() == 0
        seen = []
        while True:
            seqs = await entries.evaluate_all("items => items.map(i => Number(i.dataset.seq))")
            seen.extend(seqs)
            newer = page.locator('[data-testid="newer"]')
            if await newer.count() == 0:
                break
            await newer.last.click()
            await page.wait_for_url("**after=**")
        # Every record once, in the order stored.
        assert seen == stored
        # The end: the last record, shown and in view once scrolled to.
        last = page.locator(f'[data-testid="timeline"] li[data-seq="{last_seq}"]')
        await last.scroll_into_view_if_needed()
        assert "sandbox.down" in (await last.text_content() or "")
        assert await page.locator("article.task").get_attribute("data-follow") == "true"
        # And back one page.
        await page.locator('[data-testid="older"]').first.click()
        await page.wait_for_url("**before=**")
        assert await entries.count() == 5000
        assert await page.locator("article.task").get_attribute("data-follow") == "false"
    finally:
        await context.close()
