"""Values of a task as HTML text: the one escaping rule, and the formats the pages share.

Every value that comes from a task (a tool's input, a page's title, an approval's summary)
is escaped by `e` before it is put in a page: the console's script only inserts fragments
the server rendered, so a hostile string is shown as text.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from typing import Any


def e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(at: float | None) -> str:
    if at is None:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} ms"


def details(label: str, value: Any) -> str:
    if value is None or value == {} or value == []:
        return ""
    return f"<details><summary>{e(label)}</summary><pre>{e(as_json(value))}</pre></details>"
