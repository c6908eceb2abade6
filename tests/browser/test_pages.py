"""The task's pages, history, dialogs, downloads, frames and the pages' own signals, on real
Chromium: a popup on the task's origin becomes a page the agent can switch to and close, a
dialog is shown and answered (or dismissed when nobody does), a download is kept as an
artifact of the task, a same-origin frame's elements can be acted on."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from gateway.browser import BrowserProcesses, dialogs
from gateway.core.results import ToolStatus
from tests.browser.conftest import BrowserGateway, Sites, browser_gateway, snapshot_ref

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def _click(b: BrowserGateway, task: object, label: str, **args: object) -> object:
    snap = (await b.call(task, "browser.snapshot")).output["snapshot"]  # type: ignore[arg-type]
    return await b.call(task, "browser.click", ref=snapshot_ref(snap, label), **args)  # type: ignore[arg-type]


async def _opened(b: BrowserGateway, task: object, result: object) -> list[dict[str, object]]:
    """The pages the click opened: in its answer, or, on a loaded machine where the new
    page comes after the click's answer, in the answer of a call after it."""
    output = result.output  # type: ignore[attr-defined]
    for _ in range(50):
        if "pages_opened" in output:
            return output["pages_opened"]  # type: ignore[no-any-return]
        await asyncio.sleep(0.1)
        output = (await b.call(task, "browser.pages")).output  # type: ignore[arg-type]
    return []


async def test_a_popup_on_the_tasks_origin_becomes_a_page(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/opener")).ok
    result = await _click(browsers, task, "Add another")
    assert result.ok, result  # type: ignore[attr-defined]
    opened = await _opened(browsers, task, result)
    assert opened and opened[0]["page"] == "p2"
    assert str(opened[0]["url"]).endswith("/second?from=popup")
    listed = await browsers.call(task, "browser.pages")
    assert [p["page"] for p in listed.output["pages"]] == ["p1", "p2"]
    assert listed.output["pages"][0]["current"] is True
    switched = await browsers.call(task, "browser.pages", switch_to="p2")
    assert switched.ok and 'heading "Second page"' in switched.output["snapshot"]
    assert switched.output["url"].endswith("/second?from=popup")
    other_ref = snapshot_ref(switched.output["snapshot"], "Other")
    other = await browsers.call(task, "browser.click", ref=other_ref)
    assert other.ok, other
    closed = await browsers.call(task, "browser.pages", close="p2")
    assert closed.ok and [p["page"] for p in closed.output["pages"]] == ["p1"]
    assert 'heading "Opener"' in closed.output["snapshot"]
    last = await browsers.call(task, "browser.pages", close="p1")
    assert last.error is not None and last.error.code == "invalid_input"
    unknown = await browsers.call(task, "browser.pages", switch_to="p9")
    assert unknown.error is not None and unknown.error.code == "stale_target"
    assert [r["data"]["page"] for r in await browsers.evidence(task, "page_opened")] == ["p2"]


async def test_a_new_tab_link_opens_a_page_and_a_foreign_popup_is_still_refused(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/opener")).ok
    tab = await _click(browsers, task, "New tab")
    assert tab.ok, tab  # type: ignore[attr-defined]
    assert await _opened(browsers, task, tab)
    foreign = await _click(browsers, task, "Foreign")
    for _ in range(50):  # on a loaded machine the popup starts after the click's answer
        if foreign.status is ToolStatus.DENIED:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.1)
        foreign = await browsers.call(task, "browser.pages")
    assert foreign.status is ToolStatus.DENIED  # type: ignore[attr-defined]
    assert foreign.error.code == "origin_blocked"  # type: ignore[attr-defined]
    # Refused at the guard (the popup never loads) or closed once it shows: said either way.
    assert foreign.error.details["blocked"][0]["target"].endswith("/popup")  # type: ignore[attr-defined]
    assert browsers.sites.log.requests == []
    pages = (await browsers.call(task, "browser.pages")).output["pages"]
    assert [p["page"] for p in pages] == ["p1", "p2"]


async def test_history_back_and_forward(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/")).ok
    assert (await browsers.call(task, "browser.navigate", url="/second")).ok
    back = await browsers.call(task, "browser.navigate_back")
    assert back.ok and back.output["url"].endswith("/")
    assert 'heading "Agents"' in back.output["snapshot"]
    forward = await browsers.call(task, "browser.navigate_forward")
    assert forward.ok and forward.output["url"].endswith("/second")
    beyond = await browsers.call(task, "browser.navigate_forward")
    assert beyond.ok and beyond.output["moved"] is False


async def test_dialogs_are_shown_and_answered(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/dialogs")).ok
    asked = await _click(browsers, task, "Delete")
    assert asked.ok, asked  # type: ignore[attr-defined]
    dialog = asked.output["dialog"]  # type: ignore[attr-defined]
    assert dialog == {"type": "confirm", "message": "Delete the run?"}
    answered = await browsers.call(task, "browser.handle_dialog", accept=True)
    assert answered.ok, answered
    assert answered.output["answered"]["accepted"] is True
    assert "deleted" in answered.output["changes"]
    prompt = await _click(browsers, task, "Rename")
    assert prompt.output["dialog"]["default_value"] == "nobody"  # type: ignore[attr-defined]
    named = await browsers.call(task, "browser.handle_dialog", accept=True, prompt_text="Ada")
    assert "name=Ada" in named.output["changes"]
    kept = await _click(browsers, task, "Delete")
    assert kept.output["dialog"]["type"] == "confirm"  # type: ignore[attr-defined]
    refused = await browsers.call(task, "browser.handle_dialog", accept=False)
    assert "kept" in refused.output["changes"]
    none = await browsers.call(task, "browser.handle_dialog", accept=True)
    assert none.error is not None and none.error.code == "stale_target"


async def test_an_unanswered_dialog_is_dismissed_by_the_next_call(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/dialogs")).ok
    asked = await _click(browsers, task, "Delete")
    assert asked.output["dialog"]["type"] == "confirm"  # type: ignore[attr-defined]
    snap = await browsers.call(task, "browser.snapshot")
    assert snap.ok, snap
    assert snap.output["dialogs_dismissed"][0]["message"] == "Delete the run?"
    waited = await browsers.call(task, "browser.wait_for", text="kept", timeout_ms=5000)
    assert waited.ok
    dismissed = await browsers.evidence(task, "dialog_dismissed")
    assert dismissed and dismissed[0]["data"]["type"] == "confirm"


async def test_leaving_a_page_that_asks_first(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    nav = await browsers.call(task, "browser.navigate", url="/leave")
    draft = snapshot_ref(nav.output["snapshot"], "Draft")
    # A page asks before it is left only after a person (here, the agent) touched it.
    assert (await browsers.call(task, "browser.type", ref=draft, text="unsaved")).ok
    leaving = await browsers.call(task, "browser.navigate", url="/second")
    assert leaving.ok, leaving
    assert leaving.output["dialog"]["type"] == "beforeunload"
    left = await browsers.call(task, "browser.handle_dialog", accept=True)
    assert left.ok, left
    assert left.output["url"].endswith("/second")


async def test_a_download_is_kept_as_an_artifact_of_the_task(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/download")).ok
    clicked = await _click(browsers, task, "Get the file")
    assert clicked.ok, clicked  # type: ignore[attr-defined]
    downloads = clicked.output.get("downloads")  # type: ignore[attr-defined]
    for _ in range(100):
        if downloads:
            break
        await asyncio.sleep(0.05)
        downloads = (await browsers.call(task, "browser.pages")).output.get("downloads")
    assert downloads and downloads[0]["name"] == "file.bin", downloads
    assert "artifact" in downloads[0], downloads
    artifact = downloads[0]["artifact"]
    assert artifact["sha256"] == hashlib.sha256(b"\x00" * 64).hexdigest()
    ref = await browsers.gw.store.get_artifact(artifact["artifact_id"])
    assert ref.task_id == task.task_id
    assert await browsers.gw.store.read_artifact(ref) == b"\x00" * 64
    assert (await browsers.evidence(task, "download_kept"))[0]["data"]["name"] == "file.bin"


async def test_a_same_origin_frames_elements_take_actions(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    nav = await browsers.call(task, "browser.navigate", url="/frames")
    snap = nav.output["snapshot"]
    inner = snapshot_ref(snap, 'button "Other"')
    assert (await browsers.call(task, "browser.click", ref=inner)).ok
    assert browsers.sites.log.requests == []


async def test_console_and_network_since_a_point(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/noisy")).ok
    waited = await browsers.call(task, "browser.wait_for", text="Noisy")
    assert waited.ok
    console = (await browsers.call(task, "browser.console")).output
    texts = [e["text"] for e in console["entries"]]
    assert any("noisy page: code 42" in t for t in texts), console
    later = await browsers.call(task, "browser.console", since=console["last"])
    assert all(e["n"] > console["last"] for e in later.output["entries"])
    network = (await browsers.call(task, "browser.network")).output["entries"]
    assert any(e["url"].endswith("/noisy") and e["status"] == 200 for e in network), network
    # What the guard refused is not listed as if the page had received it.
    assert (await browsers.call(task, "browser.navigate", url="/subresource")).ok
    network = (await browsers.call(task, "browser.network")).output["entries"]
    assert all(e["url"].startswith(browsers.sites.allowed) for e in network), network


async def test_a_dialog_nobody_answers_is_dismissed_in_time(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dialogs, "DIALOG_TIMEOUT_S", 0.5)
    async with browser_gateway(tmp_path, sites, task_chromium) as b:
        task = await b.task()
        assert (await b.call(task, "browser.navigate", url="/dialogs")).ok
        asked = await _click(b, task, "Alert")
        assert asked.output["dialog"]["message"] == "Saved!"  # type: ignore[attr-defined]
        for _ in range(100):
            if await b.evidence(task, "dialog_dismissed"):
                break
            await asyncio.sleep(0.05)
        dismissed = await b.evidence(task, "dialog_dismissed")
        assert dismissed and "nobody answered" in dismissed[0]["data"]["why"]
        assert (await b.call(task, "browser.wait_for", text="alerted", timeout_ms=5000)).ok


async def test_a_frame_on_a_refused_origin_shows_as_refused_by_its_origin_alone(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    foreign = browsers.sites.foreign
    framed = await browsers.call(task, "browser.navigate", url="/embed")
    assert framed.status is ToolStatus.DENIED and framed.error is not None
    snap = (await browsers.call(task, "browser.snapshot")).output["snapshot"]
    assert f'iframe "Payments" [refused: {foreign}]' in snap, snap
    # A same-origin frame its server redirected to the foreign origin is refused too.
    assert f'iframe "Hop" [refused: {foreign}]' in snap, snap
    assert "abc123" not in snap and "/widget" not in snap
    # The same-origin frame beside them keeps its refs, and they act.
    inner = snapshot_ref(snap, 'button "Other"')
    assert (await browsers.call(task, "browser.click", ref=inner)).ok
    assert browsers.sites.log.requests == []


@pytest.mark.parametrize(("label", "path"), [("Slow", "/slow?s=2.5"), ("Busy", "/busy?from=popup")])
async def test_the_click_that_opens_a_late_popup_answers_with_it(
    browsers: BrowserGateway, label: str, path: str
) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/late-popups")).ok
    result = await _click(browsers, task, label)
    assert result.ok, result  # type: ignore[attr-defined]
    # In the click's own answer, not only in a later call's.
    opened = result.output.get("pages_opened")  # type: ignore[attr-defined]
    assert opened and opened[0]["page"] == "p2", result.output  # type: ignore[attr-defined]
    assert str(opened[0]["url"]).endswith(path)
    listed = (await browsers.call(task, "browser.pages")).output["pages"]
    assert [p["page"] for p in listed] == ["p1", "p2"]
