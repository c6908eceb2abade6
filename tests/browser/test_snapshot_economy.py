"""Snapshots a model can afford: every one bounded with a hint how to narrow it, narrowed
by ref, role and name, or depth, and an action's answer is what changed, not the page."""

from __future__ import annotations

import pytest

from tests.browser.conftest import BrowserGateway, snapshot_ref

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ROWS = 5000


async def test_a_5000_row_table_is_bounded_and_can_be_narrowed(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    bound = browsers.gw.settings.browser_snapshot_max_chars
    page = await browsers.call(task, "browser.navigate", url=f"/table?rows={ROWS}")
    assert page.ok, page
    assert page.output["truncated"] is True
    assert len(page.output["snapshot"]) <= bound
    assert "Narrow it" in page.output["hint"] and "role" in page.output["hint"]
    # One row, by its link's role and name: a few lines, with a ref to act on.
    row = await browsers.call(task, "browser.snapshot", role="link", name="Agent 4321")
    assert row.ok and row.output["truncated"] is False
    assert len(row.output["snapshot"]) < 200, row.output["snapshot"]
    link = snapshot_ref(row.output["snapshot"], "Agent 4321")
    # The table's outline, to a depth: one line a row, still bounded.
    outline = await browsers.call(task, "browser.snapshot", role="table", depth=3)
    assert outline.ok and len(outline.output["snapshot"]) <= bound
    # The ref from the narrowed snapshot acts on the page.
    opened = await browsers.call(task, "browser.click", ref=link)
    assert opened.ok, opened
    assert opened.output["url"].endswith("/second?row=4321")
    # A click that navigated answers with the new page, whole.
    assert 'heading "Second page"' in opened.output["snapshot"]


async def test_an_actions_answer_is_what_changed(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    page = await browsers.call(task, "browser.navigate", url="/")
    name = snapshot_ref(page.output["snapshot"], '"Name"')
    save = snapshot_ref(page.output["snapshot"], "Save")
    filled = await browsers.call(task, "browser.fill", ref=name, value="Ada")
    assert filled.ok, filled
    assert "snapshot" not in filled.output
    ref = f"{filled.output['snapshot_id']}.{name.split('.')[1]}"
    lines = [line.replace("  ", "") for line in filled.output["changes"].splitlines()]
    # The field, before and after, under its same ref; focus moved to it; nothing else.
    assert f'- - textbox "Name" [ref={ref}]' in lines, lines
    assert f'+ - textbox "Name" [active] [ref={ref}]: Ada' in lines, lines
    assert len(lines) <= 4, lines
    clicked = await browsers.call(task, "browser.click", ref=save)
    assert clicked.ok and "Saved Ada" in clicked.output["changes"]
    # Unchanged elements keep their refs: the first snapshot's Save still works.
    assert (await browsers.call(task, "browser.click", ref=save)).ok
    whole = await browsers.call(task, "browser.click", ref=save, snapshot=True)
    assert 'heading "Agents"' in whole.output["snapshot"]
