"""What a task's pages say on their own: console messages and the responses they received.

Kept per task in two bounded rings, each entry numbered, so an agent that must see why a
form did not save asks for what came since a number it saw (`browser.console`,
`browser.network`). Only what the guard let through is listed: a response from an origin
the task may not reach is the guard's own refusal, already in evidence as
`origin_blocked`. Text is bounded and redacted (secret-shaped values, and every value the
task typed as a secret), and a URL keeps no query string values.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from playwright.async_api import ConsoleMessage, Response

from gateway.core.redaction import Redactor

MAX_ENTRIES = 500
TEXT_CHARS = 1000
URL_CHARS = 512
_REDACTOR = Redactor(include_env=False)


def _bare_url(url: str) -> str:
    """The URL without user info, with each query value replaced, and a query item with
    no value replaced whole (a query can carry a token either way)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "[unreadable URL]"
    query = "&".join(
        f"{pair.split('=', 1)[0]}=…" if "=" in pair else "…"
        for pair in parts.query.split("&")
        if pair
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))[:URL_CHARS]


def _masked(text: str, secrets: set[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "[secret]")
    return _REDACTOR.text(text[: TEXT_CHARS * 2])[:TEXT_CHARS]


@dataclass
class Signals:
    allowed: Callable[[str], bool] = lambda _url: False
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    messages: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_ENTRIES))
    responses: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_ENTRIES))

    def console(self, message: ConsoleMessage, secrets: set[str]) -> None:
        self.messages.append(
            {
                "n": next(self._seq),
                "type": message.type,
                "text": _masked(message.text, secrets),
                "page": _bare_url(message.page.url if message.page is not None else ""),
            }
        )

    def page_error(self, error: str, page_url: str, secrets: set[str]) -> None:
        self.messages.append(
            {
                "n": next(self._seq),
                "type": "pageerror",
                "text": _masked(error, secrets),
                "page": _bare_url(page_url),
            }
        )

    def response(self, response: Response) -> None:
        url = response.url
        if not self.allowed(url):
            return
        request = response.request
        self.responses.append(
            {
                "n": next(self._seq),
                "method": request.method,
                "url": _bare_url(url),
                "status": response.status,
                "type": request.resource_type,
            }
        )

    def since(self, kind: str, after: int, limit: int) -> dict[str, Any]:
        ring = self.messages if kind == "console" else self.responses
        entries = [e for e in ring if e["n"] > after]
        shown = entries[:limit]
        return {
            "entries": shown,
            "more": len(entries) > len(shown),
            "last": shown[-1]["n"] if shown else after,
        }
