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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.realapps.snapshot_text import Node, find

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

    def page_changed_unseen(self, answer: str) -> bool:
        """The answer says the page changed without showing it."""
        ...

    def url(self, path: str) -> str: ...
    def navigate(self, url: str) -> tuple[str, dict[str, Any]]: ...
    def snapshot(self) -> tuple[str, dict[str, Any]]: ...
    def click(self, node: Node) -> tuple[str, dict[str, Any]]: ...
    def fill(self, node: Node, value: str) -> tuple[str, dict[str, Any]]: ...
    def select(self, node: Node, labels: list[str]) -> tuple[str, dict[str, Any]]: ...
    def press(self, key: str) -> tuple[str, dict[str, Any]]: ...
    def dialog(self, accept: bool) -> tuple[str, dict[str, Any]]: ...
    async def upload(self, agent: Agent, node: Node, file: Path) -> None: ...
    async def to_new_page(self, agent: Agent) -> None: ...
    async def to_first_page(self, agent: Agent) -> None: ...


class Agent:
    def __init__(self, call: Caller, dialect: Dialect) -> None:
        self._call = call
        self.dialect = dialect
        self.meter = Meter()
        self.last = ""
        # The page as the model last saw it whole, until an answer says it changed unseen:
        # a model acts on what it has read, and reads again only when it must.
        self.page = ""

    def forget(self) -> None:
        self.last = self.page = ""

    async def tool(self, tool: str, args: dict[str, Any]) -> str:
        ok, text = await self._call(tool, args)
        self.meter.calls.append(tool)
        self.meter.sizes.append(len(text))
        self.meter.characters += len(text)
        if not ok:
            raise StepFailed(f"{tool}: {text[:400]}")
        self.last = text
        if self.dialect.whole_page(text):
            self.page = text
        elif self.dialect.page_changed_unseen(text):
            self.page = ""
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

    async def click(self, role: str, name: str | None, nth: int = 0) -> None:
        await self._do(self.dialect.click(await self.element(role, name, nth)))

    async def fill(self, role: str, name: str, value: str, nth: int = 0) -> None:
        await self._do(self.dialect.fill(await self.element(role, name, nth), value))

    async def select(self, role: str, name: str, *labels: str) -> None:
        await self._do(self.dialect.select(await self.element(role, name), list(labels)))

    async def press(self, key: str) -> None:
        await self._do(self.dialect.press(key))

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

    def page_changed_unseen(self, answer: str) -> bool:
        return False  # a changed page comes whole, a changed part as its changes

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
        return "browser_select_option", {"ref": node.ref, "labels": labels}

    def press(self, key: str) -> tuple[str, dict[str, Any]]:
        return "browser_press", {"key": key}

    def dialog(self, accept: bool) -> tuple[str, dict[str, Any]]:
        return "browser_handle_dialog", {"accept": accept}

    async def upload(self, agent: Agent, node: Node, file: Path) -> None:
        await agent.tool("browser_upload", {"ref": node.ref, "path": file.name})

    async def to_new_page(self, agent: Agent) -> None:
        await agent.tool("browser_pages", {})

    async def to_first_page(self, agent: Agent) -> None:
        await agent.tool("browser_pages", {})


class PeerDialect:
    """Playwright MCP's tools."""

    name = "peer"

    def __init__(self, origin: str, workspace: Path) -> None:
        self.origin = origin
        self.workspace = workspace

    def whole_page(self, answer: str) -> bool:
        return "### Snapshot\n```yaml" in answer

    def page_changed_unseen(self, answer: str) -> bool:
        return "[Snapshot](" in answer  # a new snapshot, written to a file

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

    async def upload(self, agent: Agent, node: Node, file: Path) -> None:
        # A click on the file input opens the chooser, which the next call answers.
        await agent.tool(*self.click(node))
        await agent.tool("browser_file_upload", {"paths": [str(self.workspace / file.name)]})

    async def _tabs(self, agent: Agent) -> list[str]:
        text = await agent.tool("browser_tabs", {"action": "list"})
        return [line for line in text.splitlines() if line.startswith("- ") and ":" in line]

    async def to_new_page(self, agent: Agent) -> None:
        tabs = await self._tabs(agent)
        if not tabs[-1].endswith("(current)") and "(current)" not in tabs[-1]:
            await agent.tool("browser_tabs", {"action": "select", "index": len(tabs) - 1})

    async def to_first_page(self, agent: Agent) -> None:
        tabs = await self._tabs(agent)
        if "(current)" not in tabs[0]:
            await agent.tool("browser_tabs", {"action": "select", "index": 0})


def result_text(result: Any) -> tuple[bool, str]:
    """What a client hands the model from a tool result: its text blocks (a gateway error
    also comes as structured content, which the text block already says)."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    if not text and result.structured_content:
        text = json.dumps(result.structured_content)
    return not result.is_error, text
