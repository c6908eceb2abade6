"""Accessibility snapshots a model can afford, with element refs that mean one thing.

Playwright's AI-mode aria snapshot marks elements `[ref=e12]`; an element keeps its ref
from one snapshot of a document to the next, and the names restart on every new document.
A ref handed to an agent names its snapshot too (`s3.e12`): it resolves while the page is
on the document that snapshot saw and the element is among those the page's snapshots of
that document have shown (the latest full one, and scoped ones since). Anything else is
`stale_target`, never an element of another page.

What the agent reads is compacted (`compact`): a link's URL on its line, refs kept where
an agent acts or narrows (named elements, an element the page marks clickable with a
pointer cursor, the focused one; not bare containers), a pointer mark only where the role
does not already say the element takes a click, and a bare container with one child folded
into it. Every snapshot is bounded, with `truncated`
and a hint how to narrow it; after an action, the answer carries only what changed since
the previous snapshot of the same document (`changes`).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus

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


_CURSOR = re.compile(r"^(\s*- )([a-z]+)(.*?) \[cursor=pointer\]", re.M)
# Roles an agent acts on, waits for or narrows to: they keep their refs. Any other element
# keeps its ref only if the page marks it clickable or it has the focus.
ACTIONABLE_ROLES = frozenset(
    {
        "button", "link", "textbox", "searchbox", "combobox", "listbox", "option",
        "checkbox", "radio", "switch", "slider", "spinbutton", "tab", "menuitem",
        "menuitemcheckbox", "menuitemradio", "treeitem", "heading", "dialog", "form",
        "table", "grid", "list", "listitem", "navigation", "main", "region", "iframe",
    }
)  # fmt: skip
_LINE_REF = re.compile(r"^(\s*- )([a-z]+)(.*?) \[ref=[a-z0-9]{1,32}\](.*)$")
# A bare container's ref: a role alone, no name (`- rowgroup [ref=e6]:`).
_BARE_REF = re.compile(r"^(\s*- [a-z]+) \[ref=[a-z0-9]{1,32}\](:?)$", re.M)
_URL_CHILD = re.compile(r"^(\s*- .*):\n\s*- /url: (\S+)$", re.M)
_ITEM = re.compile(r"^(\s*)- (.*)$")


def compact(raw: str) -> str:
    """Playwright's snapshot with what a model does not need taken out (see the module)."""
    text = "\n".join(_line_compacted(line) for line in raw.split("\n"))
    text = _URL_CHILD.sub(r"\1 -> \2", text)
    text = _BARE_REF.sub(_bare_ref_dropped, text)
    text = _bare_generics_unwrapped(text)
    folded = _fold_single_children(text)
    while folded != text:  # a fold can make another (a row of one cell of one link)
        text, folded = folded, _fold_single_children(folded)
    return _rows_on_one_line(folded)


def _line_compacted(line: str) -> str:
    # Each pass looks only at the lines it can change: a 25 kB snapshot is 850 lines.
    line = _passive_ref_dropped(line)
    return _CURSOR.sub(_cursor_mark, line) if "[cursor=pointer]" in line else line


_BARE_GENERIC = re.compile(r"^\s*- generic(:?)$")
# The document's own box, focused when nothing else is: that says nothing either.
_FOCUSED_ROOT = re.compile(r"^- generic \[active\] \[ref=[a-z0-9]{1,32}\](:?)$")


def _bare_generics_unwrapped(text: str) -> str:
    """A `generic` with no name, ref or text is a layout box (a `div`): its children take
    its place, one level up, and an empty one goes. So does the page's root box when it
    only holds the focus nothing else has (a snapshot keeps its shape as focus moves)."""
    out: list[str] = []
    dropped: list[int] = []  # the depths of the boxes the current line is inside
    for line in text.split("\n"):
        if dropped:
            depth = _depth(line)
            while dropped and dropped[-1] >= depth:
                dropped.pop()
        if "generic" in line:
            box = _BARE_GENERIC.match(line) or _FOCUSED_ROOT.match(line)
            if box is not None:
                if box.group(1):
                    dropped.append(_depth(line))
                continue
        out.append(line[2 * len(dropped) :] if dropped else line)
    return "\n".join(out)


def _cursor_mark(found: re.Match[str]) -> str:
    """A control's pointer cursor says nothing its role does not; on any other element
    (a clickable `div`: a card, an expander, a custom menu item) it is the only sign that
    the element takes a click, so it stays, and with it the element's ref."""
    head = f"{found.group(1)}{found.group(2)}{found.group(3)}"
    return head if found.group(2) in ACTIONABLE_ROLES else f"{head} [cursor=pointer]"


def _bare_ref_dropped(found: re.Match[str]) -> str:
    role = found.group(1).rsplit("- ", 1)[-1]
    return found.group(0) if role in ACTIONABLE_ROLES else found.group(1) + found.group(2)


def _passive_ref_dropped(line: str) -> str:
    found = _LINE_REF.match(line)
    if (
        found is None
        or found.group(2) in ACTIONABLE_ROLES
        or "[cursor=pointer]" in line
        or "[active]" in line
    ):
        return line
    return f"{found.group(1)}{found.group(2)}{found.group(3)}{found.group(4)}"


_ROW = re.compile(r"^(\s*)- ((?:[a-z]+ > )*row):$")


def _rows_on_one_line(text: str) -> str:
    """A table row whose cells are one line each reads as one line: cells joined by `|`."""
    if "row:" not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        row = _ROW.match(lines[i]) if lines[i].endswith("row:") else None
        if row:
            depth = len(row.group(1)) + 2
            cells = []
            j = i + 1
            while j < len(lines) and _depth(lines[j]) >= depth:
                if _depth(lines[j]) > depth:
                    break  # a cell with children of its own: the row stays as it is
                cells.append(lines[j].strip()[2:])
                j += 1
            if cells and (j == len(lines) or _depth(lines[j]) < depth):
                out.append(f"{row.group(1)}- {row.group(2)}: {' | '.join(cells)}")
                i = j
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


_CONTAINER = re.compile(r'^(\s*)- ([a-z]+)( "(?:[^"\\\n]|\\.)*")?:$')


def _fold_single_children(text: str) -> str:
    """`- cell:` whose only child is `- link "x"` becomes `- cell > link "x"`; so does
    `- rowheader "x":` whose only child is named the same (`- link "x"`)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        bare = _CONTAINER.match(line) if line.endswith(":") else None
        child = _ITEM.match(lines[i + 1]) if bare and i + 1 < len(lines) else None
        named = bare.group(3) if bare else None
        if (
            bare
            and child
            and len(child.group(1)) == len(bare.group(1)) + 2
            and (named is None or child.group(2).startswith(f"{_role(child.group(2))}{named}"))
        ):
            end = i + 2
            while end < len(lines) and _depth(lines[end]) > len(child.group(1)):
                end += 1
            if end == len(lines) or _depth(lines[end]) <= len(bare.group(1)):
                out.append(f"{bare.group(1)}- {bare.group(2)} > {child.group(2)}")
                out += [below[2:] for below in lines[i + 2 : end]]
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _role(item: str) -> str:
    return item.split(" ", 1)[0].split(":", 1)[0]


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: its number, the document generation it saw, the refs it handed out."""

    seq: int
    document: int
    refs: frozenset[str]  # Playwright's own names (`e12`)
    text: str
    truncated: bool
    full: bool = True  # of the whole page (else of one element, or to a depth)
    total_chars: int = 0  # before the bound
    plain: str = ""  # the bounded text with Playwright's own refs, to compare snapshots


def build_snapshot(
    raw: str, *, seq: int, document: int, max_chars: int, full: bool = True
) -> Snapshot:
    """A compacted, bounded snapshot whose refs name it."""
    # A template, not a callback per ref: the passes stay in C.
    text = _PLAYWRIGHT_REF.sub(rf"[ref=s{seq}.\1]", compact(raw))
    total = len(text)
    truncated = total > max_chars
    if truncated:
        # Cut at a line boundary so no ref is half printed; refs cut off are not handed out.
        cut = text.rfind("\n", 0, max_chars)
        text = text[: cut if cut > 0 else max_chars]
    plain = text.replace(f"[ref=s{seq}.", "[ref=")
    refs = set(_PLAYWRIGHT_REF.findall(plain))
    return Snapshot(
        seq=seq,
        document=document,
        refs=frozenset(refs),
        text=text,
        truncated=truncated,
        full=full,
        total_chars=total,
        plain=plain,
    )


# An iframe with nothing in it: a frame that did not load, or one the guard refused.
_EMPTY_FRAME = re.compile(r"^(\s*)- iframe\b[^\n:]*\[ref=([a-z0-9]{1,32})\][^\n:]*$", re.M)


def empty_frames(raw: str) -> list[str]:
    """The Playwright refs of the iframes of `raw` that show no content."""
    if "- iframe" not in raw:  # most pages: no pass of the pattern over every line
        return []
    return [found.group(2) for found in _EMPTY_FRAME.finditer(raw)]


def mark_refused_frames(raw: str, refused: dict[str, tuple[str, str]]) -> str:
    """Each refused frame's line as `iframe "title" [refused: origin]`, by Playwright ref
    (`refused`: ref -> (title, origin)); without a ref, as nothing in it can be acted on."""
    if not refused:
        return raw

    def mark(found: re.Match[str]) -> str:
        if found.group(2) not in refused:
            return found.group(0)
        title, origin = refused[found.group(2)]
        name = f" {json.dumps(title[:80], ensure_ascii=False)}" if title else ""
        return f"{found.group(1)}- iframe{name} [refused: {origin}]"

    return _EMPTY_FRAME.sub(mark, raw)


def shows_field_value(raw: str) -> bool:
    """Whether a text box of `raw` shows a value: the only lines `mask_secrets` changes."""
    return "- textbox" in raw and _TEXTBOX_VALUE.search(raw) is not None


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


NARROW_HINT = (
    "the page's snapshot is {total} characters; this one stops at {shown}. Narrow it: "
    "browser.snapshot with ref (an element's ref), role and name (e.g. role table), or depth"
)


def hint(snap: Snapshot) -> str | None:
    """How to get the rest of a snapshot that was cut."""
    if not snap.truncated:
        return None
    return NARROW_HINT.format(total=snap.total_chars, shown=len(snap.text))


def changes(before: Snapshot, after: Snapshot) -> str:
    """What `after` shows that `before` did not (`+ `) and what it no longer shows (`- `),
    refs as `after` names them. Both of one document, whose refs are stable between them.

    An element whose line changed in place (the same ref, or the same role and name at the
    same place: a field's value, an option's `[selected]`, a count) shows once, as it is
    now; a line whose only change is that the focus left it is not shown (the element
    that took the focus shows `[active]`). Lines are shown without the page's indentation
    beyond what separates them."""
    old, new = before.plain.split("\n"), after.plain.split("\n")
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        gone, came = old[i1:i2], new[j1:j2]
        left = {_unfocused(line) for line in gone if "[active]" in line}
        quiet = {line for line in gone if "[active]" in line and _unfocused(line) in came}
        kept = {_same_element(line) for line in came}
        lines += [
            f"- {line}" for line in gone if line not in quiet and _same_element(line) not in kept
        ]
        lines += [f"+ {line}" for line in came if line not in left]
    return _PLAYWRIGHT_REF.sub(rf"[ref=s{after.seq}.\1]", _dedent(lines))


_LINE_HEAD = re.compile(r'^(\s*- [a-z]+(?: > [a-z]+)*(?: "(?:[^"\\\n]|\\.)*")?)')


def _same_element(line: str) -> str:
    """What names a line's element across a change of its state: its ref, else its place,
    role and name."""
    ref = _PLAYWRIGHT_REF.search(line)
    if ref is not None:
        return ref.group(1)
    head = _LINE_HEAD.match(line)
    return head.group(1) if head else line


def _unfocused(line: str) -> str:
    """The line as it reads once the focus left its element."""
    return _BARE_REF.sub(_bare_ref_dropped, line.replace(" [active]", "", 1))


def _dedent(lines: list[str]) -> str:
    depth = min((len(line) - 2 - len(line[2:].lstrip(" ")) for line in lines), default=0)
    return "\n".join(line[:2] + line[2 + depth :] for line in lines)


@dataclass
class Refs:
    """The refs of the page's current document that an agent may use."""

    document: int = 0
    first_seq: int = 0  # the first snapshot of this document
    names: frozenset[str] = frozenset()

    def learn(self, snap: Snapshot) -> None:
        if snap.document != self.document or snap.seq < self.first_seq:
            self.document, self.first_seq, self.names = snap.document, snap.seq, snap.refs
        elif snap.full:
            self.names = snap.refs  # a full snapshot says what the document holds now
        else:
            self.names = self.names | snap.refs  # a scoped one adds what it showed


def resolve_ref(ref: str, known: Refs, document: int) -> str:
    """Playwright's name for `ref`, if it still names an element of the current document."""
    if not _REF.match(ref):
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.INVALID_INPUT,
            f"{ref[:64]!r} is not an element ref from browser.snapshot",
        )
    seq_text, name = ref[1:].split(".", 1)
    if known.names == frozenset() and known.first_seq == 0:
        raise _stale(ref, "the page has no snapshot yet; take one")
    if known.document != document or int(seq_text) < known.first_seq:
        raise _stale(ref, "the page has navigated since that snapshot; take a new snapshot")
    if name not in known.names:
        raise _stale(ref, "the page's latest snapshot has no such element")
    return name


def _stale(ref: str, why: str) -> ToolFailure:
    return ToolFailure(ToolStatus.FAILED, ErrorCode.STALE_TARGET, f"ref {ref}: {why}")
