"""What a user asks of Django's admin, and how the suite checks it was done.

Each task is a script of the steps a person would take (by role and name, never a ref or
a selector) and a check that reads the app's SQLite database, outside the browser. A task
that only reads (a filtered list, a search) is checked by comparing the agent's answer,
taken from what the page showed it, with the database. Tasks run in order in one signed-in
session per side, each on its own seeded records, so one task's outcome does not decide
another's.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from bench.realapps.agent import Agent
from bench.realapps.library_site import ADMIN_PASSWORD, ADMIN_USER
from bench.realapps.snapshot_text import names_under
from bench.realapps.tasks import Check, Db, Task, expect

BOOKS = "/admin/library/book/"
COVER = "cover.txt"
COVER_TEXT = "A plain cover, for the upload task.\n"
NEW_PASSWORD = "library-admin-password-2"


def find_book(db: Db, title: str) -> dict[str, Any] | None:
    found = db.rows(
        "select b.id, a.name, b.genre, b.published, b.in_stock, b.cover, t.name "
        "from library_book b join library_author a on a.id = b.author_id "
        "left join library_author t on t.id = b.translator_id where b.title = ?",
        title,
    )
    if not found:
        return None
    keys = ("id", "author", "genre", "published", "in_stock", "cover", "translator")
    return dict(zip(keys, found[0], strict=True))


async def _open_book(agent: Agent, title: str) -> None:
    await agent.open(BOOKS)
    await agent.click("link", title)


async def _result_titles(agent: Agent) -> list[str]:
    return names_under(await agent.page_text(), "link", ("main", "table"))


# -- the scripts ---------------------------------------------------------------------------


async def sign_in(agent: Agent) -> None:
    await agent.open("/admin/login/?next=/admin/")
    await agent.fill("textbox", "Username:", ADMIN_USER)
    await agent.fill("textbox", "Password:", ADMIN_PASSWORD)
    await agent.click("button", "Log in")


async def add_author(agent: Agent) -> None:
    await agent.open("/admin/library/author/add/")
    await agent.fill("textbox", "Name:", "Ursula K. Le Guin")
    await agent.click("button", "Save")


async def add_two_tags(agent: Agent) -> None:
    await agent.open("/admin/library/tag/add/")
    await agent.fill("textbox", "Name:", "translated")
    await agent.click("button", "Save and add another")
    await agent.fill("textbox", "Name:", "signed")
    await agent.click("button", "Save")


async def add_book_with_selects(agent: Agent) -> None:
    await agent.open(BOOKS + "add/")
    await agent.fill("textbox", "Title:", "Dawn")
    await agent.select("combobox", "Author:", "Octavia Butler")
    await agent.select("combobox", "Genre:", "Fiction")
    await agent.click("button", "Save")


async def add_book_with_tags(agent: Agent) -> None:
    await agent.open(BOOKS + "add/")
    await agent.fill("textbox", "Title:", "The Demon-Haunted World")
    await agent.select("combobox", "Author:", "Carl Sagan")
    await agent.select("combobox", "Genre:", "Science")
    await agent.select("listbox", "Tags:", "classic", "award")
    await agent.click("button", "Save")


async def upload_cover(agent: Agent) -> None:
    await _open_book(agent, "Frankenstein")
    await agent.upload("button", "Cover:", Path(COVER))
    await agent.click("button", "Save")


async def add_author_in_popup(agent: Agent) -> None:
    await agent.open(BOOKS + "add/")
    await agent.fill("textbox", "Title:", "Binti")
    await agent.click("link", "Add another author")
    await agent.to_new_page()
    await agent.fill("textbox", "Name:", "Nnedi Okorafor")
    await agent.click("button", "Save")
    await agent.to_first_page()
    await agent.select("combobox", "Genre:", "Fiction")
    await agent.click("button", "Save")


async def rename_author_in_popup(agent: Agent) -> None:
    await _open_book(agent, "SPQR")
    await agent.click("link", "Change selected author")
    await agent.to_new_page()
    await agent.fill("textbox", "Name:", "Dame Mary Beard")
    await agent.click("button", "Save")
    await agent.to_first_page()
    await agent.click("button", "Save")


async def filter_by_genre(agent: Agent) -> list[str]:
    await agent.open(BOOKS)
    await agent.click("link", "History")
    return await _result_titles(agent)


async def search_titles(agent: Agent) -> list[str]:
    await agent.open(BOOKS)
    await agent.fill("textbox", "Search", "man")
    await agent.press("Enter")
    return await _result_titles(agent)


async def sort_by_title(agent: Agent) -> str:
    await agent.open(BOOKS)
    await agent.click("link", "Title")
    return (await _result_titles(agent))[0]


async def rename_with_keyboard(agent: Agent) -> None:
    await _open_book(agent, "Kindred")
    await agent.fill("textbox", "Title:", "Kindred (graphic novel)")
    await agent.press("Enter")


async def mark_out_of_stock(agent: Agent) -> None:
    await _open_book(agent, "Contact")
    await agent.click("checkbox", "In stock")
    await agent.click("button", "Save")


async def published_today(agent: Agent) -> None:
    await _open_book(agent, "Twenty Love Poems")
    await agent.click("link", "Today")
    await agent.click("button", "Save")


async def published_from_calendar(agent: Agent) -> None:
    await _open_book(agent, "Women and Power")
    await agent.click("link", "Choose a Date")
    await agent.click("link", "15")
    await agent.click("button", "Save")


async def add_chapter_inline(agent: Agent) -> None:
    await _open_book(agent, "Cosmos")
    await agent.click("button", "Add another Chapter")
    await agent.fill("spinbutton", "Number:", "1")
    await agent.fill("textbox", "Heading:", "The Shores of the Cosmic Ocean")
    await agent.click("button", "Save")


async def delete_with_confirmation(agent: Agent) -> None:
    await _open_book(agent, "The Last Man")
    await agent.click("link", "Delete")
    await agent.click("button", "Yes, I’m sure")


async def delete_two_with_action(agent: Agent) -> None:
    await agent.open(BOOKS)
    await agent.click("checkbox", "Select this object for an action - Pale Blue Dot")
    await agent.click("checkbox", "Select this object for an action - Parable of the Sower")
    await agent.select("combobox", "Action:", "Delete selected books")
    await agent.click("button", "Go")
    await agent.click("button", "Yes, I’m sure")


async def action_after_warning(agent: Agent) -> None:
    # Save with an action chosen makes the admin ask (a confirm dialog) whether Go was
    # meant; the user cancels, then runs the action with Go.
    await agent.open(BOOKS)
    await agent.click("checkbox", "Select this object for an action - Frankenstein")
    await agent.select("combobox", "Action:", "Delete selected books")
    await agent.click("button", "Save")
    await agent.answer_dialog(accept=False)
    await agent.click("button", "Go")
    await agent.click("button", "Yes, I’m sure")


async def add_user(agent: Agent) -> None:
    await agent.open("/admin/auth/user/add/")
    await agent.fill("textbox", "Username:", "curator")
    await agent.fill("textbox", "Password:", "curator-password-1")
    await agent.fill("textbox", "Password confirmation:", "curator-password-1")
    await agent.click("button", "Save")


async def group_with_permission(agent: Agent) -> None:
    await agent.open("/admin/auth/group/add/")
    await agent.fill("textbox", "Name:", "Editors")
    await agent.select("listbox", "Available permissions", "Library | book | Can change book")
    await agent.click("button", "Choose selected permissions")
    await agent.click("button", "Save")


async def make_superuser(agent: Agent) -> None:
    await agent.open("/admin/auth/user/")
    await agent.click("link", "editor")
    await agent.click("checkbox", "Superuser status")
    await agent.click("button", "Save")


async def change_password(agent: Agent) -> None:
    await agent.open("/admin/password_change/")
    await agent.fill("textbox", "Old password:", ADMIN_PASSWORD)
    await agent.fill("textbox", "New password:", NEW_PASSWORD)
    await agent.fill("textbox", "New password confirmation:", NEW_PASSWORD)
    await agent.click("button", "Change my password")


async def sign_out(agent: Agent) -> None:
    await agent.open("/admin/")
    await agent.click("button", "Log out")


# -- the checks ----------------------------------------------------------------------------


def _signed_in(db: Db, _: Any, __: Path) -> str | None:
    return expect(db.one("select count(*) from django_session") >= 1, "no session")


def _author(db: Db, _: Any, __: Path) -> str | None:
    n = db.one("select count(*) from library_author where name = 'Ursula K. Le Guin'")
    return expect(n == 1, "no such author")


def _tags(db: Db, _: Any, __: Path) -> str | None:
    names = {r[0] for r in db.rows("select name from library_tag")}
    return expect({"translated", "signed"} <= names, f"tags are {sorted(names)}")


def _dawn(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "Dawn")
    ok = book is not None and book["author"] == "Octavia Butler" and book["genre"] == "fiction"
    return expect(ok, f"book is {book}")


def _tagged(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "The Demon-Haunted World")
    if book is None:
        return "no such book"
    tags = {
        r[0]
        for r in db.rows(
            "select t.name from library_book_tags bt join library_tag t on t.id = bt.tag_id "
            "where bt.book_id = ?",
            book["id"],
        )
    }
    ok = book["genre"] == "science" and tags == {"classic", "award"}
    return expect(ok, f"book is {book}, tags {sorted(tags)}")


def _cover(db: Db, _: Any, folder: Path) -> str | None:
    book = find_book(db, "Frankenstein")
    if not book or not book["cover"]:
        return f"no cover: {book}"
    stored = folder / "media" / book["cover"]
    return expect(
        stored.exists() and stored.read_text() == COVER_TEXT, f"stored file {stored} differs"
    )


def _binti(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "Binti")
    return expect(book is not None and book["author"] == "Nnedi Okorafor", f"book is {book}")


def _renamed_author(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "SPQR")
    return expect(book is not None and book["author"] == "Dame Mary Beard", f"book is {book}")


def _listed(sql: str) -> Check:
    def check(db: Db, answer: Any, _: Path) -> str | None:
        wanted = sorted(r[0] for r in db.rows(sql))
        return expect(sorted(answer or []) == wanted, f"answered {answer}, the list is {wanted}")

    return check


def _first_title(db: Db, answer: Any, _: Path) -> str | None:
    wanted = db.one("select title from library_book order by title limit 1")
    return expect(answer == wanted, f"answered {answer!r}, the first is {wanted!r}")


def _book_field(title: str, key: str, value: Any) -> Check:
    def check(db: Db, _: Any, __: Path) -> str | None:
        book = find_book(db, title)
        return expect(book is not None and book[key] == value, f"book is {book}")

    return check


def _today(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "Twenty Love Poems")
    today = dt.datetime.now(dt.UTC).date().isoformat()
    return expect(book is not None and book["published"] == today, f"book is {book}")


def _fifteenth(db: Db, _: Any, __: Path) -> str | None:
    book = find_book(db, "Women and Power")
    day = dt.datetime.now(dt.UTC).date().replace(day=15).isoformat()
    return expect(book is not None and book["published"] == day, f"book is {book}")


def _chapter(db: Db, _: Any, __: Path) -> str | None:
    found = db.rows(
        "select c.number, c.heading from library_chapter c join library_book b "
        "on b.id = c.book_id where b.title = 'Cosmos'"
    )
    return expect(found == [(1, "The Shores of the Cosmic Ocean")], f"chapters are {found}")


def _gone(*titles: str) -> Check:
    def check(db: Db, _: Any, __: Path) -> str | None:
        left = [t for t in titles if find_book(db, t) is not None]
        return expect(not left, f"still there: {left}")

    return check


def _user(db: Db, _: Any, __: Path) -> str | None:
    found = db.rows("select password from auth_user where username = 'curator'")
    return expect(bool(found) and found[0][0].startswith("pbkdf2_"), "no curator with a password")


def _group(db: Db, _: Any, __: Path) -> str | None:
    found = db.rows(
        "select p.codename from auth_group g join auth_group_permissions gp "
        "on gp.group_id = g.id join auth_permission p on p.id = gp.permission_id "
        "where g.name = 'Editors'"
    )
    return expect(found == [("change_book",)], f"Editors has {found}")


def _superuser(db: Db, _: Any, __: Path) -> str | None:
    flag = db.one("select is_superuser from auth_user where username = 'editor'")
    return expect(flag == 1, "editor is not a superuser")


def _password(db: Db, _: Any, folder: Path) -> str | None:
    stored = db.one("select password from auth_user where username = ?", ADMIN_USER)
    initial = (folder / "initial-admin-password").read_text()
    return expect(stored != initial, "the password hash did not change")


def _signed_out(db: Db, _: Any, __: Path) -> str | None:
    n = db.one("select count(*) from django_session")
    return expect(n == 0, f"{n} sessions left")


TASKS: list[Task] = [
    Task("sign in", "Sign in to the admin as admin.", sign_in, _signed_in),
    Task("add a record", "Add the author Ursula K. Le Guin.", add_author, _author),
    Task(
        "save and add another",
        "Add the tags translated and signed, one after the other.",
        add_two_tags,
        _tags,
    ),
    Task(
        "create with selects",
        "Add the book Dawn by Octavia Butler, genre Fiction.",
        add_book_with_selects,
        _dawn,
    ),
    Task(
        "multiple select",
        "Add The Demon-Haunted World by Carl Sagan (Science), tagged classic and award.",
        add_book_with_tags,
        _tagged,
    ),
    Task("upload a file", "Give Frankenstein the cover file cover.txt.", upload_cover, _cover),
    Task(
        "related-object popup (add)",
        "Add the book Binti by a new author, Nnedi Okorafor, genre Fiction.",
        add_author_in_popup,
        _binti,
    ),
    Task(
        "related-object popup (change)",
        "From the book SPQR, rename its author to Dame Mary Beard.",
        rename_author_in_popup,
        _renamed_author,
    ),
    Task(
        "filter a list",
        "Which books are in the History genre?",
        filter_by_genre,
        _listed("select title from library_book where genre = 'history'"),
    ),
    Task(
        "search a list",
        "Which books have 'man' in their title?",
        search_titles,
        _listed("select title from library_book where title like '%man%'"),
    ),
    Task(
        "sort a list",
        "Sort the books by title: which comes first?",
        sort_by_title,
        _first_title,
    ),
    Task(
        "edit via keyboard",
        "Rename Kindred to 'Kindred (graphic novel)', submitting with Enter.",
        rename_with_keyboard,
        _book_field("Kindred (graphic novel)", "genre", "fiction"),
    ),
    Task(
        "checkbox",
        "Mark Contact as out of stock.",
        mark_out_of_stock,
        _book_field("Contact", "in_stock", 0),
    ),
    Task(
        "date shortcut",
        "Set Twenty Love Poems' publication date to today.",
        published_today,
        _today,
    ),
    Task(
        "date picker",
        "Set Women and Power's publication date to the 15th of this month, with the calendar.",
        published_from_calendar,
        _fifteenth,
    ),
    Task(
        "inline formset",
        "Add chapter 1, 'The Shores of the Cosmic Ocean', to Cosmos.",
        add_chapter_inline,
        _chapter,
    ),
    Task(
        "delete with confirmation page",
        "Delete The Last Man.",
        delete_with_confirmation,
        _gone("The Last Man"),
    ),
    Task(
        "bulk action",
        "Delete Pale Blue Dot and Parable of the Sower together.",
        delete_two_with_action,
        _gone("Pale Blue Dot", "Parable of the Sower"),
    ),
    Task(
        "confirm dialog",
        "Delete Frankenstein with the list's action (the admin warns about Save first).",
        action_after_warning,
        _gone("Frankenstein"),
    ),
    Task(
        "add a user",
        "Create the user curator with a password.",
        add_user,
        _user,
    ),
    Task(
        "select filter widget",
        "Create the group Editors that may change books.",
        group_with_permission,
        _group,
    ),
    Task("toggle a flag", "Make editor a superuser.", make_superuser, _superuser),
    Task(
        "change password",
        "Change the admin's password.",
        change_password,
        _password,
    ),
    Task("sign out", "Sign out.", sign_out, _signed_out),
]
