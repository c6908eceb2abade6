"""The narrow interfaces adapters are given, instead of the whole `Gateway`.

An adapter (a door, the tab hub, the bridge, the browser pool) is handed only what it uses,
so what it may touch is plain from its constructor, and a test can hand it a stand-in:

- `CallRunner`: run one tool call through the pipeline to its terminal result;
- `Catalog`: the tools an identity may see;
- `EventRecorder`: evidence that is not a call (once, or aggregated for floods);
- `TaskLookup`: a token to the task's stored identity (and its claims).

The core's own classes satisfy them: `Pipeline`, `Registry`, `EventLog`, `TaskService`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.identity import TaskIdentity
from gateway.registry import ProgressFn
from gateway.results import Door, ToolResult
from gateway.tokens import Purpose, TokenClaims


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
