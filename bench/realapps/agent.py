"""The scripted agent: one script per task, run the same on either side.

A task's script says what a user would do in words a model would use ("fill the textbox
named Title", "choose Science in the Genre combobox"). The agent turns each of those into
the side's tool calls: it looks for the element by role and name in the last answer it got,
asks for a snapshot when that answer does not show it (as a model would), and calls the
side's tool with the ref it found. It keeps no ref or selector between pages and has no
fallback of its own: when a side has no tool for a step, or a tool fails, the task fails
with what the side answered.

Every answer is counted: calls, and characters of the text handed to the model.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.realapps.snapshot_text import Node, find

TRACE = os.environ.get("REALAPPS_TRACE") == "1"  # every call and answer, on stderr
Caller = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, str]]]


class StepFailed(Exception):
    """A step the side could not do; the message is what it answered."""


@dataclass
class Meter:
    calls: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    characters: int = 0


class Dialect(Protocol):
    """How one side names its tools and their arguments."""

    name: str

    def whole_page(self, answer: str) -> bool:
        """The answer shows the whole page (a snapshot the model can read)."""
        ...

    def url_of(self, answer: str) -> str | None:
        """The page's address as the answer gives it, if it does."""
        ...

    def url(self, path: str) -> str: ...
    def navigate(self, url: str) -> tuple[str, dict[str, Any]]: ...
    def snapshot(self) -> tuple[str, dict[str, Any]]: ...
    def click(self, node: Node) -> tuple[str, dict[str, Any]]: ...
    def fill(self, node: Node, value: str) -> tuple[str, dict[str, Any]]: ...
    def select(self, node: Node, labels: list[str]) -> tuple[str, dict[str, Any]]: ...
    def press(self, key: str) -> tuple[str, dict[str, Any]]: ...
    def dialog(self, accept: bool) -> tuple[str, dict[str, Any]]: ...
    def wait_text(self, text: str) -> tuple[str, dict[str, Any]]: ...
    async def upload(self, agent: Agent, node: Node, file: Path) -> None: ...
    async def to_new_page(self, agent: Agent) -> None: ...
    async def to_first_page(self, agent: Agent) -> None: ...


class Agent:
    def __init__(self, call: Caller, dialect: Dialect) -> None:
        self._call = call
        self.dialect = dialect
        self.meter = Meter()
        self.last = ""
        # The page as the model last saw it whole, until an answer says another page is
        # shown: a model acts on what it has read, and reads again only when it must.
        self.page = ""
        self.page_url: str | None = None

    def forget(self) -> None:
        self.last = self.page = ""
        self.page_url = None

    async def tool(self, tool: str, args: dict[str, Any]) -> str:
        ok, text = await self._call(tool, args)
        if TRACE:
            print(f"--- {self.dialect.name} {tool} {args}\n{text}", file=sys.stderr)
        self.meter.calls.append(tool)
        self.meter.sizes.append(len(text))
        self.meter.characters += len(text)
        if not ok:
            raise StepFailed(f"{tool}: {text[:400]}")
        self.last = text
        url = self.dialect.url_of(text)
        if self.dialect.whole_page(text):
            self.page, self.page_url = text, url
        elif url is not None and url != self.page_url:
            self.page = ""  # another page, not seen yet
        return text

    async def _do(self, step: tuple[str, dict[str, Any]]) -> str:
        return await self.tool(*step)

    async def look(self) -> str:
        return await self._do(self.dialect.snapshot())

    async def element(self, role: str, name: str | None, nth: int = 0) -> Node:
        """The element as the last answer shows it, or the page as last seen whole, or as a
        fresh snapshot does."""
        node = find(self.last, role, name, nth) or find(self.page, role, name, nth)
        if node is None:
            await self.look()
            node = find(self.last, role, name, nth)
        if node is None:
            raise StepFailed(f"no {role} named {name!r} in the snapshot")
        return node

    async def page_text(self) -> str:
        """The whole page as the model sees it (as last seen whole, if nothing changed it)."""
        if not self.page:
            await self.look()
        return self.page

    # -- the steps a task script uses -----------------------------------------------------

    async def open(self, path: str) -> None:
        await self._do(self.dialect.navigate(self.dialect.url(path)))

    async def _act(
        self, role: str, name: str | None, nth: int, step: Callable[[Node], tuple[str, Any]]
    ) -> None:
        remembered = find(self.last, role, name, nth) is None
        node = await self.element(role, name, nth)
        try:
            await self._do(step(node))
        except StepFailed:
            if not remembered:
                raise
            # A ref from an earlier read may have gone stale: read the page again, once.
            await self.look()
            node = await self.element(role, name, nth)
            await self._do(step(node))

    async def click(self, role: str, name: str | None, nth: int = 0) -> None:
        await self._act(role, name, nth, self.dialect.click)

    async def fill(self, role: str, name: str, value: str, nth: int = 0) -> None:
        await self._act(role, name, nth, lambda node: self.dialect.fill(node, value))

    async def select(self, role: str, name: str, *labels: str) -> None:
        await self._act(role, name, 0, lambda node: self.dialect.select(node, list(labels)))

    async def press(self, key: str) -> None:
        await self._do(self.dialect.press(key))

    async def wait_text(self, text: str) -> None:
        await self._do(self.dialect.wait_text(text))

    async def answer_dialog(self, accept: bool) -> None:
        await self._do(self.dialect.dialog(accept))

    async def upload(self, role: str, name: str, file: Path) -> None:
        await self.dialect.upload(self, await self.element(role, name), file)

    async def to_new_page(self) -> None:
        await self.dialect.to_new_page(self)

    async def to_first_page(self) -> None:
        await self.dialect.to_first_page(self)


# -- the two sides ---------------------------------------------------------------------------


class GatewayDialect:
    """The gateway's task browser tools (browser.*), as exposed over its MCP door."""

    name = "gateway"

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def whole_page(self, answer: str) -> bool:
        return "\nsnapshot: |" in answer

    def url_of(self, answer: str) -> str | None:
        for line in reversed(answer.splitlines()):
            if line.startswith("url: "):
                return line[5:].strip()
        return None

    def url(self, path: str) -> str:
        return path  # resolved against the task's app origin

    def navigate(self, url: str) -> tuple[str, dict[str, Any]]:
        return "browser_navigate", {"url": url}

    def snapshot(self) -> tuple[str, dict[str, Any]]:
        return "browser_snapshot", {}

    def click(self, node: Node) -> tuple[str, dict[str, Any]]:
        return "browser_click", {"ref": node.ref}

    def fill(self, node: Node, value: str) -> tuple[str, dict[str, Any]]:
        return "browser_fill", {"ref": node.ref, "value": value}

    def select(self, node: Node, labels: list[str]) -> tuple[str, dict[str, Any]]:
        return "browser_select_option", {"ref": node.ref, "options": labels}

    def press(self, key: str) -> tuple[str, dict[str, Any]]:
        return "browser_press", {"key": key}

    def dialog(self, accept: bool) -> tuple[str, dict[str, Any]]:
        return "browser_handle_dialog", {"accept": accept}

    def wait_text(self, text: str) -> tuple[str, dict[str, Any]]:
        return "browser_wait_for", {"text": text}

    async def upload(self, agent: Agent, node: Node, file: Path) -> None:
        await agent.tool("browser_upload", {"ref": node.ref, "paths": [file.name]})

    @staticmethod
    def _pages(answer: str, key: str) -> list[dict[str, Any]]:
        for line in answer.splitlines():
            if line.startswith(f"{key}: ["):
                found: list[dict[str, Any]] = json.loads(line.partition(": ")[2])
                return found
        return []

    async def to_new_page(self, agent: Agent) -> None:
        # The answer of the click that opened the window names it; else the list does.
        opened = self._pages(agent.last, "pages_opened")
        if not opened:
            listed = self._pages(await agent.tool("browser_pages", {}), "pages")
            opened = [p for p in listed if not p.get("current")]
        if not opened:
            raise StepFailed("no new page was opened")
        await agent.tool("browser_pages", {"switch_to": opened[-1]["page"]})

    async def to_first_page(self, agent: Agent) -> None:
        if self._pages(agent.last, "pages_closed") and self.whole_page(agent.last):
            return  # the window closed itself, and the answer shows the page beneath
        listed = self._pages(await agent.tool("browser_pages", {}), "pages")
        if listed and not listed[0].get("current"):
            await agent.tool("browser_pages", {"switch_to": listed[0]["page"]})
        else:
            agent.page = ""  # back on the first page, not seen since it changed


class PeerDialect:
    """Playwright MCP's tools."""

    name = "peer"

    def __init__(self, origin: str, workspace: Path) -> None:
        self.origin = origin
        self.workspace = workspace
        self._first_url = ""

    def whole_page(self, answer: str) -> bool:
        return "### Snapshot\n```yaml" in answer

    def url_of(self, answer: str) -> str | None:
        for line in answer.splitlines():
            if line.startswith("- Page URL: "):
                return line[12:].strip()
        return None

    def url(self, path: str) -> str:
        return self.origin + path

    def navigate(self, url: str) -> tuple[str, dict[str, Any]]:
        return "browser_navigate", {"url": url}

    def snapshot(self) -> tuple[str, dict[str, Any]]:
        return "browser_snapshot", {}

    @staticmethod
    def _target(node: Node) -> dict[str, Any]:
        return {"target": node.ref, "element": f"{node.role} {node.name}".strip()}

    def click(self, node: Node) -> tuple[str, dict[str, Any]]:
        return "browser_click", self._target(node)

    def fill(self, node: Node, value: str) -> tuple[str, dict[str, Any]]:
        return "browser_type", {**self._target(node), "text": value}

    def select(self, node: Node, labels: list[str]) -> tuple[str, dict[str, Any]]:
        return "browser_select_option", {**self._target(node), "values": labels}

    def press(self, key: str) -> tuple[str, dict[str, Any]]:
        return "browser_press_key", {"key": key}

    def dialog(self, accept: bool) -> tuple[str, dict[str, Any]]:
        return "browser_handle_dialog", {"accept": accept}

    def wait_text(self, text: str) -> tuple[str, dict[str, Any]]:
        return "browser_wait_for", {"text": text}

    async def upload(self, agent: Agent, node: Node, file: Path) -> None:
        # A click on the file input opens the chooser, which the next call answers.
        await agent.tool(*self.click(node))
        await agent.tool("browser_file_upload", {"paths": [str(self.workspace / file.name)]})

    async def _tabs(self, agent: Agent) -> list[str]:
        text = await agent.tool("browser_tabs", {"action": "list"})
        return [line for line in text.splitlines() if line.startswith("- ") and ":" in line]

    @staticmethod
    def _shown_tabs(answer: str) -> list[str]:
        if "### Open tabs" not in answer:
            return []
        section = answer.split("### Open tabs", 1)[1].split("###", 1)[0]
        return [line for line in section.splitlines() if line.startswith("- ")]

    async def to_new_page(self, agent: Agent) -> None:
        # The answer of the click that opened the window lists the tabs; else the list does.
        tabs = self._shown_tabs(agent.last) or await self._tabs(agent)
        self._first_url = tabs[0].rsplit("(", 1)[-1].rstrip(")")
        if "(current)" not in tabs[-1]:
            await agent.tool("browser_tabs", {"action": "select", "index": len(tabs) - 1})
        agent.page = ""

    async def to_first_page(self, agent: Agent) -> None:
        if agent.dialect.url_of(agent.last) == self._first_url:
            return  # the window closed itself, and the answer is about the page beneath
        tabs = await self._tabs(agent)
        if "(current)" not in tabs[0]:
            await agent.tool("browser_tabs", {"action": "select", "index": 0})
        agent.page = ""


def result_text(result: Any) -> tuple[bool, str]:
    """What a client hands the model from a tool result: its text blocks (a gateway error
    also comes as structured content, which the text block already says)."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    if not text and result.structured_content:
        text = json.dumps(result.structured_content)
    return not result.is_error, text
