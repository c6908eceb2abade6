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
    # A click that navigated answers with the new page in short: its title and heading.
    assert "snapshot" not in opened.output
    assert opened.output["title"] == "Second"
    assert 'heading "Second page" [level=1]' in opened.output["outline"]


async def test_an_actions_answer_is_what_changed(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    page = await browsers.call(task, "browser.navigate", url="/")
    name = snapshot_ref(page.output["snapshot"], '"Name"')
    save = snapshot_ref(page.output["snapshot"], "Save")
    filled = await browsers.call(task, "browser.fill", ref=name, value="Ada")
    assert filled.ok, filled
    assert "snapshot" not in filled.output
    ref = f"{filled.output['snapshot_id']}.{name.split('.')[1]}"
    lines = filled.output["changes"].splitlines()
    # The field as it is now, under its same ref, with the focus; nothing else (the line
    # it had before is the same element, and where the focus was says nothing).
    assert lines == [f'+ - textbox "Name" [active] [ref={ref}]: Ada'], lines
    clicked = await browsers.call(task, "browser.click", ref=save)
    assert clicked.ok and "Saved Ada" in clicked.output["changes"]
    # Unchanged elements keep their refs: the first snapshot's Save still works.
    assert (await browsers.call(task, "browser.click", ref=save)).ok
    whole = await browsers.call(task, "browser.click", ref=save, snapshot=True)
    assert 'heading "Agents"' in whole.output["snapshot"]


async def test_a_saved_form_answers_with_what_the_next_page_says(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    form = await browsers.call(task, "browser.navigate", url="/books")
    title = snapshot_ref(form.output["snapshot"], "Title")
    save = snapshot_ref(form.output["snapshot"], "Save")
    # Sent empty, the server answers the post with the form and its error: the next step
    # reads it, so it comes whole.
    sent_back = await browsers.call(task, "browser.click", ref=save)
    assert sent_back.ok, sent_back
    assert "Please correct the error below." in sent_back.output["snapshot"]
    title = snapshot_ref(sent_back.output["snapshot"], "Title")
    save = snapshot_ref(sent_back.output["snapshot"], "Save")
    assert (await browsers.call(task, "browser.fill", ref=title, value="Dune")).ok
    # Saved, it redirects to the list: the answer is its title, its heading and the message
    # above it, not its forty links, and says how to read the page whole.
    saved = await browsers.call(task, "browser.click", ref=save)
    assert saved.ok, saved
    assert saved.output["url"].endswith("/books?added=Dune")
    assert "snapshot" not in saved.output and saved.output["title"] == "Books"
    outline = saved.output["outline"]
    assert "The book Dune was added." in outline and 'heading "Books" [level=1]' in outline
    assert "Book 7" not in outline
    assert "browser.snapshot" in saved.output["hint"]
    # The outline's refs are the page's: the heading's, and the page read whole has them too.
    whole = await browsers.call(task, "browser.snapshot")
    assert "Book 7" in whole.output["snapshot"]
    link = snapshot_ref(whole.output["snapshot"], "Book 7")
    assert (await browsers.call(task, "browser.click", ref=link)).ok
    # Asked for it, the action answers with the new page whole.
    back = await browsers.call(task, "browser.navigate_back")
    again = await browsers.call(
        task, "browser.click", ref=snapshot_ref(back.output["snapshot"], "Book 3"), snapshot=True
    )
    assert 'heading "Second page"' in again.output["snapshot"]
