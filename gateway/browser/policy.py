"""The task browser's origin policy, with no I/O: which URLs a task's page may be on.

A page may be on `about:blank` or on an http(s) URL whose exact origin is one of the
sandbox's. `browser.navigate` takes an absolute URL within those origins or a path that is
resolved against the sandbox's app origin; every other scheme (`javascript:`, `data:`,
`blob:`, `file:`...) is refused before anything reaches the browser.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from gateway.core.errors import ToolFailure
from gateway.core.identity import Sandbox
from gateway.core.origins import OriginError, origin_of
from gateway.core.results import ErrorCode, ToolStatus

BLANK = "about:blank"
# Where Chromium itself calls home (updates, autofill, safe browsing, field trials). A
# refused request there that is not a page's navigation is Chromium's, not the task's.
BROWSER_SERVICE_SUFFIXES = (
    ".googleapis.com",
    ".gvt1.com",
    ".gstatic.com",
    ".google.com",
    ".googleusercontent.com",
)
MAX_URL_CHARS = 2048


def page_url_allowed(url: str, origins: frozenset[str]) -> bool:
    """Whether a page (main frame or popup) may stay on `url`."""
    if url == BLANK:
        return True
    try:
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            return False
        return origin_of(url) in origins
    except ValueError:  # OriginError, or urlsplit's own for a malformed netloc
        return False


def is_browser_service(target: str) -> bool:
    """Whether a refused request's target (`host:port` or a URL) is one of Chromium's own
    services."""
    host = urlsplit(target if "://" in target else f"//{target}").hostname or ""
    return host.endswith(BROWSER_SERVICE_SUFFIXES)


def resolve_target(url: str, sandbox: Sandbox) -> str:
    """The absolute URL `browser.navigate` may go to, or a denied/origin_blocked failure."""
    text = url.strip()
    # Characters a browser's URL parser treats differently from Python's (backslashes,
    # controls, spaces) could make the checked URL and the visited URL differ: refuse them.
    if (
        not text
        or len(text) > MAX_URL_CHARS
        or "\\" in text
        or any(ord(c) < 0x21 or ord(c) == 0x7F for c in text)
    ):
        raise _blocked(url, "the URL is empty, too long or has characters that are not allowed")
    if text.startswith("/") and not text.startswith("//"):
        return urljoin(sandbox.app_origin + "/", text)
    try:
        scheme = urlsplit(text).scheme.lower()
    except ValueError:  # a malformed netloc (`http://[::1`) is not a URL of the sandbox
        raise _blocked(url, "the URL is malformed") from None
    if scheme not in ("http", "https"):
        raise _blocked(url, f"{scheme or 'a relative'} URL is not an http(s) URL of the sandbox")
    try:
        origin = origin_of(text)
    except OriginError as exc:
        raise _blocked(url, str(exc)) from None
    if origin not in sandbox.origins:
        raise _blocked(url, f"{origin} is not one of the task's allowed origins")
    return text


def _blocked(url: str, why: str) -> ToolFailure:
    return ToolFailure(
        ToolStatus.DENIED,
        ErrorCode.ORIGIN_BLOCKED,
        f"navigation refused: {why}",
        details={"target": url[:512]},
    )
