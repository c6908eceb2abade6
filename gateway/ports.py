"""The narrow interfaces adapters are given, instead of the whole `Gateway`.

An adapter (a door, the tab hub, the bridge, the browser pool) is handed only what it uses,
so what it may touch is plain from its constructor, and a test can hand it a stand-in:

- `CallRunner`: run one tool call through the pipeline to its terminal result;
- `Catalog`: the tools an identity may see;
- `EventRecorder`: evidence that is not a call (once, or aggregated for floods);
- `TaskLookup`: a token to the task's stored identity (and its claims);
- `ApprovalDesk`: where a channel hands a person's answer to an approval request;
- `Elicit`: how a door asks the person at the agent's client (MCP elicitation).

The core's own classes satisfy them: `Pipeline`, `Registry`, `EventLog`, `TaskService`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from gateway.identity import TaskIdentity
from gateway.registry import ProgressFn
from gateway.results import Door, ToolResult
from gateway.tokens import Purpose, TokenClaims

# Given an approval request as people read it (`summary`, `tool`, `details`...), the
# person's answer as (decision, scope): ("approve" | "deny", "call" | "task"), or None
# when they dismissed the question.
Elicit = Callable[[Mapping[str, Any]], Awaitable[tuple[str, str] | None]]


class CallRunner(Protocol):
    async def call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        idempotency_key: str | None = None,
        progress: ProgressFn | None = None,
        cancel: asyncio.Event | None = None,
        call_id: str | None = None,
        elicit: Elicit | None = None,
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
