"""Accessibility snapshots whose element refs belong to one snapshot of one document.

Playwright's AI-mode aria snapshot marks elements `[ref=e12]`, and those names restart on
every new document. A ref handed to an agent is therefore rewritten to name its snapshot
too (`s3.e12`); it resolves only while that snapshot is the page's latest and the page has
not navigated since. Anything else is `stale_target`, never an element of another page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import ToolFailure
from gateway.results import ErrorCode, ToolStatus

_PLAYWRIGHT_REF = re.compile(r"\[ref=([a-z0-9]{1,32})\]")
# A text box's line with its value: `- textbox "Password" [active] [ref=e3]: hunter2`.
_TEXTBOX_VALUE = re.compile(
    r'^(\s*- textbox(?: "(?:[^"\\\n]|\\.)*")?(?: \[[^\]\n]*\])*): (.+)$', re.M
)
MASKED_VALUE = "[secret]"

# Whether an element holds a secret: a password field, or one the page says takes a
# password (autocomplete current-password / new-password / one-time-code).
PRIVATE_FIELD_CHECK = """(e) => e instanceof HTMLInputElement && (e.type === "password"
  || /(^|\\s)(current-password|new-password|one-time-code)(\\s|$)/.test(e.autocomplete || ""))"""
# The values of every such field of a document, for masking them in its snapshot.
PRIVATE_FIELD_VALUES = (
    "() => Array.from(document.querySelectorAll('input'))"
    f".filter({PRIVATE_FIELD_CHECK}).map((e) => e.value).filter(Boolean)"
)
REF_PATTERN = r"^s[0-9]{1,9}\.[a-z0-9]{1,32}$"
_REF = re.compile(REF_PATTERN)


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: its number, the document generation it saw, the refs it handed out."""

    seq: int
    document: int
    refs: frozenset[str]  # Playwright's own names (`e12`)
    text: str
    truncated: bool


def build_snapshot(raw: str, *, seq: int, document: int, max_chars: int) -> Snapshot:
    # A template and findall, not a callback per ref: both passes stay in C.
    refs = set(_PLAYWRIGHT_REF.findall(raw))
    text = _PLAYWRIGHT_REF.sub(rf"[ref=s{seq}.\1]", raw)
    truncated = len(text) > max_chars
    if truncated:
        # Cut at a line boundary so no ref is half printed.
        cut = text.rfind("\n", 0, max_chars)
        text = text[: cut if cut > 0 else max_chars]
        # Refs that were cut off are not handed out.
        refs = set(_PLAYWRIGHT_REF.findall(text.replace(f"[ref=s{seq}.", "[ref=")))
    return Snapshot(
        seq=seq, document=document, refs=frozenset(refs), text=text, truncated=truncated
    )


def mask_secrets(raw: str, values: set[str]) -> str:
    """The snapshot with the value of every text box holding one of `values` masked
    (Playwright prints a password field's value like any other)."""
    if not values:
        return raw

    def mask(match: re.Match[str]) -> str:
        shown = match.group(2)
        plain = shown[1:-1] if len(shown) > 1 and shown[0] == shown[-1] == '"' else shown
        if shown in values or plain in values:
            return f"{match.group(1)}: {MASKED_VALUE}"
        return match.group(0)

    return _TEXTBOX_VALUE.sub(mask, raw)


def resolve_ref(ref: str, latest: Snapshot | None, document: int) -> str:
    """Playwright's name for `ref`, if it still belongs to the page's latest snapshot."""
    if not _REF.match(ref):
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            f"{ref[:64]!r} is not an element ref from browser.snapshot",
        )
    seq_text, name = ref[1:].split(".", 1)
    if latest is None or int(seq_text) != latest.seq:
        raise _stale(ref, "it is not from the page's latest snapshot; take a new snapshot")
    if latest.document != document:
        raise _stale(ref, "the page has navigated since that snapshot; take a new snapshot")
    if name not in latest.refs:
        raise _stale(ref, "that snapshot has no such element")
    return name


def _stale(ref: str, why: str) -> ToolFailure:
    return ToolFailure(ToolStatus.FAILED, ErrorCode.STALE_TARGET, f"ref {ref}: {why}")
