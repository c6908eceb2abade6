"""What an answer says about a page an action loaded, when the agent did not ask for it whole.

After a click, a key or a form's submit that loads another page, the agent needs to know what
happened (where it is, and what the page says about its action), not the whole page: most
such pages are read only when the next step needs one of their refs. The outline is taken
from the page's snapshot (so its refs are that snapshot's and stay valid) and holds, in the
page's order:

- its headings of level 1 (the page's own title, as it shows it);
- what the page says to the user: every element of a live role (alert, status, log), a
  dialog, and the text of the main region above its first heading (where apps put the
  message a saved form leaves: "The book was added successfully.");

each with what is below it, bounded. No I/O: a pure function of the snapshot's text.
"""

from __future__ import annotations

import re

# Roles whose elements are the page speaking to its user.
MESSAGE_ROLES = frozenset({"alert", "status", "log", "alertdialog", "dialog"})
MAX_LINES = 30
MAX_LINES_PER_MESSAGE = 8
MAX_CHARS = 2_000

# A line's roles; a line holding ": " in a name is quoted whole (`- 'heading "a: b"'`).
_ITEM = re.compile(r"^(\s*)- '?([a-z]+(?: > [a-z]+)*)(.*)$")
_BARE = re.compile(r"^- [a-z]+(?: > [a-z]+)*:?$")


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _roles(line: str) -> list[str]:
    found = _ITEM.match(line)
    return found.group(2).split(" > ") if found else []


def outline(text: str) -> str:
    """The lines of the snapshot `text` that say what the page is and what it says."""
    lines = text.split("\n")
    picked: list[str] = []
    i = 0
    main_depth: int | None = None  # inside `main`, above its first heading
    while i < len(lines) and len(picked) < MAX_LINES:
        line = lines[i]
        depth, roles = _depth(line), _roles(line)
        if main_depth is not None and (depth <= main_depth or "heading" in roles):
            main_depth = None
        if "heading" in roles and "[level=1]" in line:
            picked.append(line.strip())
        elif MESSAGE_ROLES.intersection(roles):
            end = _subtree_end(lines, i)
            picked += _dedented(lines[i:end][:MAX_LINES_PER_MESSAGE])
            i = end
            continue
        elif main_depth is not None and not _BARE.match(line.strip()):
            picked.append(line[main_depth + 2 :])
        if "main" in roles and main_depth is None:
            main_depth = depth
        i += 1
    shown = "\n".join(picked[:MAX_LINES])
    if len(shown) > MAX_CHARS:
        cut = shown.rfind("\n", 0, MAX_CHARS)
        shown = shown[: cut if cut > 0 else MAX_CHARS]
    return shown


def _subtree_end(lines: list[str], start: int) -> int:
    depth = _depth(lines[start])
    end = start + 1
    while end < len(lines) and _depth(lines[end]) > depth:
        end += 1
    return end


def _dedented(block: list[str]) -> list[str]:
    top = _depth(block[0])
    return [line[top:] for line in block]
