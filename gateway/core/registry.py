"""The tool registry: explicit tools with schemas, rights, bounds and handlers.

A `Tool` declares everything the pipeline needs to run it safely. The registry resolves
names and filters the catalog an identity sees; it never decides a call on its own (the
pipeline authorizes every call again, whatever the caller was shown).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from gateway.core.approval_policy import Approver, Need, approval_need
from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ErrorCode, ToolStatus

TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# The names agent clients accept: Claude Desktop refuses a whole tool list over one name
# outside `^[a-zA-Z0-9_-]{1,64}$`, Codex and Copilot have the same rule. A tool keeps its
# canonical id (`browser.navigate`: evidence, the bridge, allowlists) and is listed to
# clients under its exposed name (`browser_navigate`), made by `exposed_name`.
EXPOSED_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_EXPOSABLE = re.compile(r"[^a-zA-Z0-9_-]")


def exposed_name(tool_id: str) -> str:
    """A tool id as clients see it: every character outside [a-zA-Z0-9_-] becomes `_`."""
    return _NOT_EXPOSABLE.sub("_", tool_id)


M = TypeVar("M", bound=BaseModel)
S = TypeVar("S")

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
# (summary, details, by) -> returns once a person approved.
Asker = Callable[[str, dict[str, Any] | None, Approver], Awaitable[None]]


@dataclass(frozen=True)
class ToolAnnotations:
    """Hints a client can show; they never grant anything. Named as the WebMCP spec names
    them (`readOnlyHint`, `consequentialHint`, `untrustedContentHint`); each door maps them
    to its own words once (the MCP door: consequential is `destructiveHint`, untrusted
    content is `openWorldHint`).

    - `read_only_hint`: the tool changes nothing;
    - `consequential_hint`: its effect is hard to undo, a client may ask the user first;
    - `untrusted_content_hint`: its output carries content from outside the product (a web
      page, a file) that a model must not take as instructions.
    """

    read_only_hint: bool = False
    consequential_hint: bool = False
    untrusted_content_hint: bool = False

    def as_dict(self) -> dict[str, bool]:
        return {
            "readOnlyHint": self.read_only_hint,
            "consequentialHint": self.consequential_hint,
            "untrustedContentHint": self.untrusted_content_hint,
        }


@dataclass
class ToolContext:
    """What a handler gets besides its validated input."""

    identity: TaskIdentity
    call_id: str
    tool: Tool
    door: Door
    services: Services
    progress: ProgressFn | None = None
    # Extra facts the handler wants in its evidence record (e.g. the page it acted on).
    evidence: dict[str, Any] = field(default_factory=dict)
    # Input fields whose values the evidence must not keep (`[secret: N chars]` instead).
    secrets: set[str] = field(default_factory=set)
    # Set by the pipeline: how this call asks a person (None where no one can be asked).
    asker: Asker | None = None
    # Who approved this call, when a person had to (`{"id", "role"}`), so a product can act
    # on the approver's authority (an admin approving a member's save); None otherwise.
    approved_by: dict[str, str] | None = None
    # Set by the pipeline as the handler starts: the seconds left before this call's
    # deadline (the tool's `timeout_s`, paused while a person is asked). None: no deadline.
    remaining: Callable[[], float] | None = None

    def time_left(self) -> float:
        """Seconds until this call's deadline (infinite for a handler run without one), so
        a handler can decline work it has no time left to finish."""
        return math.inf if self.remaining is None else max(0.0, self.remaining())

    def secret(self, input_field: str) -> None:
        """Keep this input field's value out of the call's evidence (a password, a key)."""
        self.secrets.add(input_field)

    def service(self, kind: type[S]) -> S:
        return self.services.get(kind)

    async def request_approval(
        self, summary: str, details: dict[str, Any] | None = None, *, by: Approver = "actor"
    ) -> None:
        """Wait for a person to approve what this call is about to do, when the product
        requires it (a run whose cost is over a threshold...). Returns once approved;
        raises the call's terminal failure when denied, unanswered in time, or cancelled.

        `summary` is what the person reads (plain text, no markup); `details` are facts
        shown beside it. `by="control"` leaves the decision to the control plane.
        """
        if self.asker is None:
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.UNAVAILABLE,
                f"{self.tool.name} needs a person's approval, and no one can be asked here",
            )
        await self.asker(summary, details, by)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self.progress is not None:
            await self.progress(progress, total, message)


Handler = Callable[[ToolContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_model: type[BaseModel]
    handler: Handler
    scopes: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()  # empty: any role
    annotations: ToolAnnotations = ToolAnnotations()
    max_output_bytes: int = 64 * 1024
    timeout_s: float = 30.0
    side_effects: bool = False
    # What a person reads when a call of this tool waits for approval, from its validated
    # input (as JSON); None: the tool's title and its input.
    approval_summary: Callable[[Any], str] | None = None
    # The output is a string a client parses (a permission-prompt answer): a door's text
    # for the model is that string alone, with no status line around it.
    text_output: bool = False
    # A call may outlast what a client waits on one request for (a long wait on a page, a
    # run that may ask a person): the MCP door lets a client run it as a task it polls.
    long_running: bool = False

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must be 1 to 128 of [A-Za-z0-9_.-]")
        if not EXPOSED_NAME.match(self.exposed_name):
            raise ValueError(
                f"tool name {self.name!r} is listed to clients as {self.exposed_name!r}, "
                "which must be at most 64 characters"
            )
        if self.timeout_s <= 0 or self.max_output_bytes <= 0:
            raise ValueError(f"tool {self.name!r}: timeout and output bound must be positive")

    @property
    def exposed_name(self) -> str:
        return exposed_name(self.name)

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's input, the caller's own copy to change."""
        return copy.deepcopy(_schema_of(self.input_model))

    def permits(self, identity: TaskIdentity) -> bool:
        """Whether the task's grant covers this tool (scopes, role, task allowlist)."""
        missing, other = self.shortfall(identity)
        return not missing and not other

    def shortfall(self, identity: TaskIdentity) -> tuple[frozenset[str], bool]:
        """What the task's grant lacks for this tool: its missing scopes, and whether a role
        or the task's `allowed_tools` refuses it too."""
        other = bool(self.roles and identity.actor.role not in self.roles) or (
            not identity.may_use_tool(self.name)
        )
        return self.scopes - identity.scopes, other

    def approval(self, identity: TaskIdentity) -> Need | None:
        """Whether a call of this tool waits for a person first (the task's approvals)."""
        missing, other = self.shortfall(identity)
        return approval_need(identity.approvals, self.name, missing, other)

    def reachable(self, identity: TaskIdentity) -> bool:
        """Whether the task may call this tool, at once or once a person approves."""
        return self.permits(identity) or self.approval(identity) is not None

    def catalog_entry(self) -> dict[str, Any]:
        """The tool as every door lists it: under its exposed name, with its id beside."""
        return {
            "name": self.exposed_name,
            "tool_id": self.name,
            "title": self.title,
            "description": self.description,
            "input_schema": self.input_schema(),
            "annotations": self.annotations.as_dict(),
            "side_effects": self.side_effects,
        }


class Services:
    """A typed bag of the adapters a handler may need (tab channels, browsers, store...)."""

    def __init__(self) -> None:
        self._items: dict[type[Any], Any] = {}

    def provide(self, kind: type[S], value: S) -> None:
        self._items[kind] = value

    def get(self, kind: type[S]) -> S:
        try:
            return self._items[kind]  # type: ignore[no-any-return]
        except KeyError:
            raise LookupError(f"no {kind.__name__} is configured in this gateway") from None

    def find(self, kind: type[S]) -> S | None:
        return self._items.get(kind)


class Registry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._exposed: dict[str, str] = {}  # exposed name -> tool id
        self._schemas: dict[str, dict[str, Any]] = {}
        self._listeners: list[Callable[[], None]] = []
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        # A name resolves to one tool, whether a caller gives the id or the exposed name.
        for name in {tool.name, tool.exposed_name}:
            other = self.get(name)
            if other is not None:
                raise ValueError(
                    f"tool {tool.name!r} would be listed as {tool.exposed_name!r}, which "
                    f"tool {other.name!r} (listed as {other.exposed_name!r}) already answers"
                )
        self._tools[tool.name] = tool
        self._exposed[tool.exposed_name] = tool.name
        self._schemas[tool.name] = tool.catalog_entry()
        for listener in self._listeners:
            listener()
        return tool

    def tool(
        self,
        name: str,
        *,
        title: str,
        description: str,
        input_model: type[M],
        scopes: Iterable[str] = (),
        roles: Iterable[str] = (),
        annotations: ToolAnnotations = ToolAnnotations(),
        max_output_bytes: int = 64 * 1024,
        timeout_s: float = 30.0,
        side_effects: bool = False,
        long_running: bool = False,
    ) -> Callable[[Callable[[ToolContext, M], Awaitable[Any]]], Tool]:
        """Decorator form: `@registry.tool("x.y", title=..., input_model=Model, scopes=[...])`."""

        def register(handler: Callable[[ToolContext, M], Awaitable[Any]]) -> Tool:
            return self.add(
                Tool(
                    name=name,
                    title=title,
                    description=description,
                    input_model=input_model,
                    handler=handler,
                    scopes=frozenset(scopes),
                    roles=frozenset(roles),
                    annotations=annotations,
                    max_output_bytes=max_output_bytes,
                    timeout_s=timeout_s,
                    side_effects=side_effects,
                    long_running=long_running,
                )
            )

        return register

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def get(self, name: str) -> Tool | None:
        """The tool with this id, or listed under this exposed name."""
        tool = self._tools.get(name)
        if tool is None and name in self._exposed:
            tool = self._tools.get(self._exposed[name])
        return tool

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def catalog(self, identity: TaskIdentity) -> list[dict[str, Any]]:
        """The tools this identity may call (some after a person approves), sorted by name.
        Listing is never authority."""
        return [
            self._schemas[t.name]
            for t in sorted(self, key=lambda t: t.name)
            if t.reachable(identity)
        ]


@functools.cache
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    # Built once per input model: a catalog lists every tool's schema on each `tools/list`,
    # and pydantic builds a model's schema anew every time it is asked.
    return model.model_json_schema()
