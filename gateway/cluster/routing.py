"""Routing: on a node of a cluster, a task's calls run on the node that owns the task.

`Routing` is the call runner the doors of a node are given (`ports.CallRunner`, as the
pipeline is on a single gateway). It wraps the local pipeline: a call whose task another
node owns is sent there (the routed-call errand, `rpc.py`) and answered with the owner's
result; every other call runs in the local pipeline, which knows nothing of the cluster.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, Unpack

from gateway.core.errors import GatewayError
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.pipeline.keys import KeyLocks
from gateway.core.ports import CallOptions, CallRunner
from gateway.core.registry import Tool
from gateway.core.results import Door, ToolResult


class LocalPipeline(CallRunner, Protocol):
    """What routing needs of this node's pipeline (`gateway.core.pipeline.Pipeline`): its
    calls, and the two answers it gives without running one."""

    async def checked(self, identity: TaskIdentity, tool_name: str) -> Tool: ...

    async def unsent(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        failure: GatewayError | None,
    ) -> ToolResult: ...


class Owner(Protocol):
    """Where a task's call runs (`ClusterNode.elsewhere`)."""

    async def elsewhere(
        self,
        identity: TaskIdentity,
        tool_name: str,
        args: Any,
        *,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        timeout_s: float,
    ) -> ToolResult | None:
        """The call's result from the task's owner, when another node owns it; None when
        it runs here (this node owns it, or just became its owner)."""
        ...


class Routing:
    """A call runner that runs each call on its task's owner."""

    def __init__(self, pipeline: LocalPipeline, owner: Owner) -> None:
        self.pipeline = pipeline
        self.owner = owner
        # Calls under one idempotency key pass here one at a time, hop included, as they
        # run one at a time in a pipeline: a replay sent after the first one finds its
        # record wherever that one ran.
        self._keys = KeyLocks()

    async def call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        **options: Unpack[CallOptions],
    ) -> ToolResult:
        """Run one call to its terminal result, on the task's owner. Never raises for a
        call-level failure. `progress`, `cancel` and `elicit` reach a call run here only."""
        call_id = options["call_id"] = options.get("call_id") or new_id("call")
        idempotency_key = options.get("idempotency_key")

        async def here() -> ToolResult:
            return await self.pipeline.call(identity, tool_name, raw_input, door=door, **options)

        try:
            # These checks need nothing of the task's owner: a call they refuse is refused
            # here, by the pipeline, as on a single gateway.
            tool = await self.pipeline.checked(identity, tool_name)
        except GatewayError:
            return await here()
        async with self._keys.holding(identity.task_id, tool, idempotency_key):
            try:
                answer = await self.owner.elsewhere(
                    identity,
                    tool.name,
                    raw_input,
                    door=door,
                    idempotency_key=idempotency_key,
                    call_id=call_id,
                    timeout_s=tool.timeout_s,
                )
            except GatewayError as exc:
                return await self._unsent(
                    identity, tool, raw_input, door, idempotency_key, call_id, exc
                )
            except asyncio.CancelledError:
                # The caller went away: the call still ends in one recorded terminal result.
                await asyncio.shield(
                    self._unsent(identity, tool, raw_input, door, idempotency_key, call_id, None)
                )
                raise
            if answer is not None:
                return answer
            return await here()

    async def _unsent(
        self,
        identity: TaskIdentity,
        tool: Tool,
        raw_input: Any,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        failure: GatewayError | None,
    ) -> ToolResult:
        return await self.pipeline.unsent(
            identity,
            tool.name,
            raw_input,
            door=door,
            idempotency_key=idempotency_key,
            call_id=call_id,
            failure=failure,
        )
