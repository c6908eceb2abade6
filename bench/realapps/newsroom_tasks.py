"""What an editor asks of Wagtail's admin, and how the suite checks it was done (in the
site's SQLite database: its page tree, its collections, its sites, its documents)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.realapps.agent import Agent
from bench.realapps.newsroom_site import ADMIN_PASSWORD, ADMIN_USER
from bench.realapps.tasks import Check, Db, Task, expect

DOCUMENT = "briefing.txt"
DOCUMENT_TEXT = "Notes for the evening briefing.\n"


async def _home(agent: Agent) -> None:
    await agent.open("/admin/pages/")
    await agent.click("link", "Explore child pages of 'Home'")


async def sign_in(agent: Agent) -> None:
    await agent.open("/admin/login/?next=/admin/")
    await agent.fill("textbox", "Username*", ADMIN_USER)
    await agent.fill("textbox", "Password*", ADMIN_PASSWORD)
    await agent.click("button", "Sign in")


async def publish_new_page(agent: Agent) -> None:
    await _home(agent)
    await agent.click("link", "Add child page")
    await agent.fill("textbox", "Title*", "Storm warning")
    await agent.click("button", "More actions")
    await agent.click("button", "Publish")


async def save_draft(agent: Agent) -> None:
    await _home(agent)
    await agent.click("link", "Add child page")
    await agent.fill("textbox", "Title*", "Ferry timetable")
    # Leaving the title, as a person does, is when the editor fills in the page's slug; a
    # click on Save draft at once saves a page with none (a validation error).
    await agent.press("Tab")
    await agent.click("button", "Save draft")


async def promote_tab(agent: Agent) -> None:
    await _home(agent)
    await agent.click("link", "Harbour reopens")
    await agent.click("tab", "Promote")
    await agent.click("checkbox", "Show in menus")
    await agent.click("button", "More actions")
    await agent.click("button", "Publish")


async def unpublish_from_menu(agent: Agent) -> None:
    await _home(agent)
    await agent.click("button", "More options for 'Budget explained'")
    await agent.click("link", "Unpublish")
    await agent.click("button", "Yes, unpublish it")


async def delete_from_menu(agent: Agent) -> None:
    await _home(agent)
    await agent.click("button", "More options for 'Election night'")
    await agent.click("link", "Delete")
    await agent.click("button", "Yes, delete it")


async def add_collection(agent: Agent) -> None:
    await agent.open("/admin/collections/add/")
    await agent.fill("textbox", "Name*", "Press photos")
    await agent.select("combobox", "Parent*", "Root")
    await agent.click("button", "Create")


async def rename_site(agent: Agent) -> None:
    await agent.open("/admin/sites/")
    await agent.click("link", "localhost")
    await agent.fill("textbox", "Site name", "Evening News")
    await agent.click("button", "Save")


async def upload_document(agent: Agent) -> None:
    await agent.open("/admin/documents/multiple/add/")
    await agent.upload("button", "Or choose from your computer", Path(DOCUMENT))
    await agent.wait_text("Update")


def _page_row(db: Db, title: str) -> dict[str, Any] | None:
    found = db.rows(
        "select live, has_unpublished_changes, show_in_menus from wagtailcore_page where title = ?",
        title,
    )
    if not found:
        return None
    return dict(zip(("live", "draft", "in_menus"), found[0], strict=True))


def _page_is(title: str, **wanted: Any) -> Check:
    def check(db: Db, _: Any, __: Path) -> str | None:
        page = _page_row(db, title)
        ok = page is not None and all(page[k] == v for k, v in wanted.items())
        return expect(ok, f"page {title!r} is {page}")

    return check


def _gone(db: Db, _: Any, __: Path) -> str | None:
    return expect(_page_row(db, "Election night") is None, "the page is still there")


def _signed_in(db: Db, _: Any, __: Path) -> str | None:
    return expect(db.one("select count(*) from django_session") >= 1, "no session")


def _collection(db: Db, _: Any, __: Path) -> str | None:
    found = db.rows("select depth from wagtailcore_collection where name = 'Press photos'")
    return expect(found == [(2,)], f"collections named so: {found}")


def _site(db: Db, _: Any, __: Path) -> str | None:
    name = db.one("select site_name from wagtailcore_site where is_default_site = 1")
    return expect(name == "Evening News", f"the site is named {name!r}")


def _document(db: Db, _: Any, folder: Path) -> str | None:
    found = db.rows("select file from wagtaildocs_document")
    if len(found) != 1:
        return f"documents: {found}"
    stored = folder / "media" / found[0][0]
    return expect(stored.exists() and stored.read_text() == DOCUMENT_TEXT, f"{stored} differs")


TASKS: list[Task] = [
    Task("sign in", "Sign in to Wagtail as admin.", sign_in, _signed_in),
    Task(
        "publish from the actions menu",
        "Publish a new page 'Storm warning' under Home.",
        publish_new_page,
        _page_is("Storm warning", live=1),
    ),
    Task(
        "save a draft",
        "Start a page 'Ferry timetable' under Home, as a draft.",
        save_draft,
        _page_is("Ferry timetable", live=0),
    ),
    Task(
        "a setting on another tab",
        "Show 'Harbour reopens' in menus, and publish it.",
        promote_tab,
        _page_is("Harbour reopens", live=1, in_menus=1, draft=0),
    ),
    Task(
        "row menu, unpublish",
        "Unpublish 'Budget explained'.",
        unpublish_from_menu,
        _page_is("Budget explained", live=0),
    ),
    Task("row menu, delete", "Delete 'Election night'.", delete_from_menu, _gone),
    Task(
        "create with a select",
        "Add the collection 'Press photos' at the top level.",
        add_collection,
        _collection,
    ),
    Task("edit a setting", "Name the site 'Evening News'.", rename_site, _site),
    Task(
        "upload a document",
        "Upload briefing.txt as a document.",
        upload_document,
        _document,
    ),
]
