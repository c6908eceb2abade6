"""The guard around the tools that move files, pages and dialogs, tried from the page's and
the agent's side: a download over the bound is refused and recorded, a popup to a foreign
origin is refused and said so, a page that never stops opening dialogs neither hangs the
task nor keeps it from leaving, and a download from a foreign origin is never fetched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.browser import BrowserProcesses
from gateway.core.results import ToolStatus
from tests.browser.conftest import BrowserGateway, Sites, browser_gateway, snapshot_ref

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def _downloads(b: BrowserGateway, task: object, first: object) -> list[dict[str, object]]:
    found = first.output.get("downloads")  # type: ignore[attr-defined]
    for _ in range(100):
        if found:
            break
        await asyncio.sleep(0.05)
        found = (await b.call(task, "browser.pages")).output.get("downloads")  # type: ignore[arg-type]
    return found or []


async def test_a_download_over_the_bound_is_refused_and_recorded(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path, sites, task_chromium, browser_download_max_bytes=16) as b:
        task = await b.task()
        nav = await b.call(task, "browser.navigate", url="/download")
        clicked = await b.call(
            task, "browser.click", ref=snapshot_ref(nav.output["snapshot"], "Get the file")
        )
        assert clicked.ok, clicked
        [download] = await _downloads(b, task, clicked)
        assert "over the bound of 16 bytes" in str(download["refused"])
        assert "artifact" not in download
        assert await b.gw.store.artifact_count(task.org_id, task.task_id) == 0
        refused = await b.evidence(task, "download_refused")
        assert refused and refused[0]["data"]["name"] == "file.bin"


async def test_a_download_past_the_tasks_artifact_quota_is_refused(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path, sites, task_chromium, max_artifacts_per_task=1) as b:
        task = await b.task()
        nav = await b.call(task, "browser.navigate", url="/download")
        link = snapshot_ref(nav.output["snapshot"], "Get the file")
        first = await b.call(task, "browser.click", ref=link)
        assert "artifact" in (await _downloads(b, task, first))[0]
        second = await b.call(task, "browser.click", ref=link)
        [refused] = await _downloads(b, task, second)
        assert "refused" in refused and "artifact" not in refused, refused
        assert await b.gw.store.artifact_count(task.org_id, task.task_id) == 1


async def test_a_popup_to_a_foreign_origin_is_refused_and_said_so(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    nav = await browsers.call(task, "browser.navigate", url="/opener")
    clicked = await browsers.call(
        task, "browser.click", ref=snapshot_ref(nav.output["snapshot"], "Foreign")
    )
    for _ in range(50):  # on a loaded machine the popup starts after the click's answer
        if clicked.status is ToolStatus.DENIED:
            break
        await asyncio.sleep(0.1)
        clicked = await browsers.call(task, "browser.pages")
    assert clicked.status is ToolStatus.DENIED and clicked.error is not None
    assert clicked.error.code == "origin_blocked"
    assert clicked.error.details is not None
    assert clicked.error.details["blocked"][0]["target"].endswith("/popup")
    assert browsers.sites.log.requests == []
    assert [p["page"] for p in (await browsers.call(task, "browser.pages")).output["pages"]] == [
        "p1"
    ]


async def test_a_page_that_never_stops_opening_dialogs_does_not_hold_the_task(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    stuck = await browsers.call(task, "browser.navigate", url="/stuck", snapshot=False)
    assert stuck.ok, stuck
    await asyncio.sleep(0.5)  # the page is in its loop of dialogs by now
    # Every call ends; the agent can leave the page.
    left = await browsers.call(task, "browser.navigate", url="/second")
    assert left.ok, left
    assert left.output["url"].endswith("/second")
    assert (
        'heading "Second page"'
        in (await browsers.call(task, "browser.snapshot")).output["snapshot"]
    )
    dismissed = await browsers.evidence(task, "dialog_dismissed")
    assert dismissed and all(d["data"]["message"] == "again" for d in dismissed)


async def test_a_refused_frame_never_loads(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    framed = await browsers.call(task, "browser.navigate", url="/frame")
    assert framed.status is ToolStatus.DENIED and framed.error is not None
    assert any(b["target"].endswith("/frame") for b in framed.error.details["blocked"])  # type: ignore[index]
    assert browsers.sites.log.requests == []
