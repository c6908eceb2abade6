"""The narrow interfaces adapters are given, instead of the whole `Gateway`.

An adapter (a door, the tab hub, the bridge, the browser pool) is handed only what it uses,
so what it may touch is plain from its constructor, and a test can hand it a stand-in:

- `CallRunner`: run one tool call through the pipeline to its terminal result, with the
  `CallOptions` a door may add;
- `Catalog`: the tools an identity may see;
- `EventRecorder`: evidence that is not a call (once, or aggregated for floods);
- `TaskLookup`: a token to the task's stored identity (and its claims);
- `ApprovalDesk`: where a channel hands a person's answer to an approval request;
- `Elicit`: how a door asks the person at the agent's client (MCP elicitation);
- `Fencing`: what the pipeline asks of whatever surrounds a call (a cluster's node), with
  `NO_FENCING`, a single gateway's, which does nothing;
- `Placement`: what the parts of a cluster's node ask of it (absent on a single gateway).

The core's own classes satisfy them: `Pipeline`, `Registry`, `EventLog`, `TaskService`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack

from gateway.core.identity import TaskIdentity
from gateway.core.registry import ProgressFn
from gateway.core.results import Door, ToolResult
from gateway.core.tokens import Purpose, TokenClaims

# Given an approval request as people read it (`summary`, `tool`, `details`...), the
# person's answer as (decision, scope): ("approve" | "deny", "call" | "task"), or None
# when they dismissed the question.
Elicit = Callable[[Mapping[str, Any]], Awaitable[tuple[str, str] | None]]


class CallOptions(TypedDict, total=False):
    """What a door may say of one call beyond its task, tool and input; each is optional.

    - `idempotency_key`: calls of a side-effecting tool under one key run once; a replay is
      answered with the first one's recorded result;
    - `progress`: where the tool's progress notes go, for a door that relays them;
    - `cancel`: set when the caller gives the call up;
    - `call_id`: the call's id, when the door has named it already;
    - `elicit`: how to ask the person at the agent's client, for a door that can.
    """

    idempotency_key: str | None
    progress: ProgressFn | None
    cancel: asyncio.Event | None
    call_id: str | None
    elicit: Elicit | None


class CallRunner(Protocol):
    async def call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        **options: Unpack[CallOptions],
    ) -> ToolResult: ...


class Catalog(Protocol):
    def catalog(self, identity: TaskIdentity) -> list[dict[str, Any]]: ...


class EventRecorder(Protocol):
    async def record(
        self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]
    ) -> str | None: ...

    def repeated(self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]) -> None: ...


class TaskLookup(Protocol):
    async def authenticate(self, token: str, purpose: Purpose) -> TaskIdentity: ...

    async def authenticate_claims(
        self, token: str, purpose: Purpose
    ) -> tuple[TaskIdentity, TokenClaims]: ...

    def claims(self, token: str, purpose: Purpose) -> TokenClaims:
        """The token's own claims (signature, purpose, age), whatever its task's state."""
        ...


class ApprovalDesk(Protocol):
    async def answer(
        self,
        identity: TaskIdentity,
        approval_id: str,
        *,
        decision: str,
        scope: str,
        channel: str,
        nonce: str | None = None,
        message: str | None = None,
    ) -> None:
        """A person's answer from `channel` on behalf of `identity`'s task; raises a
        `GatewayError` when it is refused (wrong task, channel or nonce, expired, decided)."""
        ...


# What a task's owner does for an errand another node sends it: given the task and the
# errand's body, its answer; a `GatewayError` raised is the answer on the node that asked.
Errand = Callable[[TaskIdentity, dict[str, Any]], Awaitable[dict[str, Any]]]


# Told that this node no longer holds a task (its owner is another node now): let go of
# what is held for it here, as on its end, but the task goes on elsewhere.
ReleaseListener = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Fenced:
    """The fence one side effect ran under: the node and the owner epoch its evidence names,
    and the guard (an UPDATE and its parameters) its evidence commits under."""

    node_id: str
    epoch: int
    guard: tuple[Any, dict[str, Any]]


class Fencing(Protocol):
    """What the pipeline asks of the cluster around a call: the cluster's node fences a side
    effect to the task's owner, and cuts short the handlers of a task it loses."""

    async def fence(
        self, identity: TaskIdentity, tool_name: str, idempotency_key: str | None, call_id: str
    ) -> Fenced | None:
        """Before a side effect: this node still owns the task and it has not ended, and a
        keyed call's intent is written. Returns the fence its evidence is committed under
        (None: nothing fences it); raises the call's failure (`in_doubt`, `revoked`, not the
        owner)."""
        ...

    def running(self, task_id: str, handler: asyncio.Future[Any]) -> None:
        """A handler of the task started (it is cancelled if the task goes elsewhere)."""
        ...


class _NoFencing:
    """A single gateway: every task is its own, so nothing fences a call."""

    async def fence(
        self, identity: TaskIdentity, tool_name: str, idempotency_key: str | None, call_id: str
    ) -> Fenced | None:
        return None

    def running(self, task_id: str, handler: asyncio.Future[Any]) -> None:
        return None


NO_FENCING: Fencing = _NoFencing()


class Placement(Protocol):
    """What the parts of a gateway ask of the cluster when it is one node of one
    (gateway/cluster): which node owns a task, errands to it, and what to let go of when
    a task moves. Absent on a single gateway."""

    node_id: str

    async def take(self, task_id: str) -> None:
        """The task's tab came to this node: it becomes the owner, whoever was."""
        ...

    def serve_errand(self, name: str, errand: Errand) -> None:
        """What this node does when it owns a task and another node sends it errand `name`."""
        ...

    async def at_owner(
        self, task_id: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The owner's answer to errand `name`, when another live node owns the task; None
        when it is done here (this node owns it, or no live node does). Claims nothing."""
        ...

    def on_release(self, listener: ReleaseListener) -> None: ...

    def browser_moved(self, task_id: str) -> str | None:
        """Why the task's browser context is gone, once, when this node took the task from
        a node that had opened one; None otherwise (and after the first ask)."""
        ...

    async def browser_opened(self, task_id: str) -> None:
        """This node opened the task's browser context (noted for a node taking over)."""
        ...
