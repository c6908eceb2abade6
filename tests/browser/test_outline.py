"""The outline of a page an action loaded: what it is and what it says, not all of it."""

from __future__ import annotations

from gateway.browser.outline import outline

# Django's admin after a Save: the message above the heading, a sidebar and a table below.
SAVED = """- link "Skip to main content" [ref=e2] -> "#content-start"
- navigation "Sidebar" [ref=e24]:
  - link "Books" [ref=e63] -> /admin/library/book/
- main [ref=e71]:
  - list [ref=e72]:
    - listitem [ref=e73]: The book “Dawn” was added successfully.
  - heading "Select book to change" [level=1] [ref=e76]
  - table [ref=e93]:
    - row: cell > link "Dawn" [ref=e126] -> /admin/library/book/11/change/
  - heading "Filter" [level=2] [ref=e224]
- contentinfo"""

# Wagtail's explorer: a status message, a heading quoted for the ": " in its name.
EXPLORED = """- main [ref=e5]:
  - status > list [ref=e80]:
    - listitem [ref=e81]: Page 'Election night' deleted.
  - 'heading "Exploring: Home" [level=1] [ref=e89]'
  - button "Toggle breadcrumbs" [ref=e91]
  - table [ref=e129]:
    - row: cell > link "Harbour reopens" [ref=e156] -> /admin/pages/5/edit/"""


def test_the_outline_is_the_heading_and_the_message_above_it() -> None:
    assert outline(SAVED).splitlines() == [
        "- list [ref=e72]:",
        "  - listitem [ref=e73]: The book “Dawn” was added successfully.",
        '- heading "Select book to change" [level=1] [ref=e76]',
    ]


def test_a_live_region_and_a_quoted_heading_end_the_outline() -> None:
    assert outline(EXPLORED).splitlines() == [
        "- status > list [ref=e80]:",
        "  - listitem [ref=e81]: Page 'Election night' deleted.",
        "- 'heading \"Exploring: Home\" [level=1] [ref=e89]'",
    ]


def test_an_alert_anywhere_is_in_it_and_the_outline_is_bounded() -> None:
    page = "\n".join(
        ['- alert [ref=e1]: "Please correct the error below."']
        + [f'- heading "Part {i}" [level=1] [ref=e{i + 2}]' for i in range(100)]
    )
    shown = outline(page).splitlines()
    assert shown[0] == '- alert [ref=e1]: "Please correct the error below."'
    assert len(shown) == 30
