"""Reading an accessibility snapshot as a model reads it: by role and name.

Both sides answer with the same YAML-like outline (`- role "name" [attrs] [ref=X]:` with
children indented below, `a > b` for a chain of single children). The agent never keeps a
ref or a selector of its own: it finds the element it means by role and name (and, where a
page has several, which one) in the text it was just given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NODE = re.compile(
    r"""^(?P<role>[a-z]+)(?:\s+"(?P<name>(?:[^"\\]|\\.)*)")?(?P<rest>.*)$""",
)
_REF = re.compile(r"\[ref=([^\]]+)\]")


@dataclass
class Node:
    role: str
    name: str
    ref: str | None
    attrs: str
    value: str
    children: list[Node] = field(default_factory=list)

    def walk(self) -> list[Node]:
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out


def _unquote(line: str) -> str:
    line = line.strip()
    if len(line) > 1 and line[0] == "'" and line.endswith("'"):
        return line[1:-1].replace("''", "'")
    if len(line) > 1 and line[0] == "'" and "':" in line:
        body, _, rest = line[1:].partition("':")
        return body.replace("''", "'") + ":" + rest
    return line


def _node(item: str) -> Node | None:
    found = _NODE.match(item.strip())
    if found is None:
        return None
    rest = found["rest"]
    ref = _REF.search(rest)
    value = ""
    if ":" in rest:
        rest, _, value = rest.partition(":")
        value = value.strip().strip('"')
    name = (found["name"] or "").replace('\\"', '"')
    return Node(found["role"], name, ref[1] if ref else None, rest, value)


def parse(text: str) -> list[Node]:
    """The outline's top-level nodes (every snapshot block of the text)."""
    roots: list[Node] = []
    stack: list[tuple[int, Node]] = []
    for raw in text.splitlines():
        stripped = raw.lstrip(" +-")
        if not raw.lstrip().startswith(("- ", "+ ")) or not stripped:
            continue
        indent = len(raw) - len(raw.lstrip())
        item = _unquote(stripped)
        head, sep, cells = item.partition(": ")
        # A table row the gateway writes on one line: `row: cell "a" | cell > link "b"`.
        in_row = sep and head.split(" > ")[-1] == "row" and '"' not in head
        chain = [_node(part) for part in (head if in_row else item).split(" > ")]
        nodes = [n for n in chain if n is not None]
        if not nodes:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        for node in nodes:
            (parent.children if parent else roots).append(node)
            parent = node
        if in_row:
            for cell in cells.split(" | "):
                below = nodes[-1]
                for part in cell.split(" > "):
                    inner = _node(part)
                    if inner is not None:
                        below.children.append(inner)
                        below = inner
        stack.append((indent, nodes[-1]))
    return roots


def find(text: str, role: str, name: str | None, nth: int = 0) -> Node | None:
    """The `nth` element of `role` named `name` (any name if None) that has a ref; a name
    that is only the start of an element's (a listbox named by its label and its help
    text) matches when no element has it whole, as a reader would take it."""
    nodes = [n for root in parse(text) for n in root.walk() if n.role == role and n.ref]
    matches = [n for n in nodes if name is None or n.name == name]
    if not matches and name:
        matches = [n for n in nodes if n.name.startswith(name + " ")]
    if not matches and name:
        # A nameless element that shows the text (a button whose label is in an <em>).
        matches = [n for n in nodes if not n.name and _shows(n, name)]
    return matches[nth] if len(matches) > nth else None


def _shows(node: Node, text: str) -> bool:
    return any(
        inner.name == text or inner.value == text for inner in node.walk() if inner is not node
    )


def names_under(
    text: str, role: str, within: tuple[str, ...], skip: str = "columnheader"
) -> list[str]:
    """Names of the `role` elements inside the first element reached by the roles of
    `within` (each inside the one before), leaving out those under a `skip` element (a
    table's header links, for a list of rows)."""

    def collect(node: Node, out: list[str]) -> None:
        if node.role == skip:
            return
        if node.role == role and node.name:
            out.append(node.name)
        for child in node.children:
            collect(child, out)

    def first(nodes: list[Node], wanted: str) -> Node | None:
        for node in nodes:
            for inner in node.walk():
                if inner.role == wanted:
                    return inner
        return None

    scope: list[Node] = parse(text)
    for wanted in within:
        found = first(scope, wanted)
        if found is None:
            return []
        scope = [found]
    names: list[str] = []
    for node in scope:
        for child in node.children:
            collect(child, names)
    return names
