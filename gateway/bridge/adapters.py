"""Host delegation adapters: the interface a host implements, and the local one shipped.

An adapter receives a validated `HostDelegationRequest` and returns a provider payload (a
mapping shaped like `wp-codebox/host-delegation-result/v1`). The gateway does not trust
that payload: `gateway.bridge.delegation` validates it again before anything of it is
returned (status, request id, session, source digest).

`LocalRegistryAdapter` runs delegated work through the gateway's own registry pipeline:
`execution.steps` is a list of `{tool, input}` calls made under the task's identity by
the `delegation` door, each authorized, validated, bounded and recorded like any call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gateway.bridge.delegation_envelopes import HostDelegationRequest
from gateway.core.identity import TaskIdentity
from gateway.core.ports import CallRunner
from gateway.core.results import Door, ToolResult

MAX_STEPS = 32

EmitFn = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class DelegationContext:
    """What an adapter may use: the calling task's identity, the call runner (the
    pipeline), an event sink."""

    identity: TaskIdentity
    pipeline: CallRunner
    emit: EmitFn

    async def call(
        self, tool: str, raw_input: Any, *, idempotency_key: str | None = None
    ) -> ToolResult:
        return await self.pipeline.call(
            self.identity, tool, raw_input, door=Door.DELEGATION, idempotency_key=idempotency_key
        )


@runtime_checkable
class HostAdapter(Protocol):
    """A host's implementation of delegated work. `name` is what `orchestrator.adapter`
    selects; `delegate` returns the provider payload, which is validated afterwards."""

    name: str

    async def delegate(
        self, request: HostDelegationRequest, context: DelegationContext
    ) -> Mapping[str, Any]: ...


class DelegationHosts:
    """The adapters a gateway offers, by name; `default` serves requests that name none."""

    def __init__(self, default: str = "local") -> None:
        self.default = default
        self._adapters: dict[str, HostAdapter] = {}

    def add(self, adapter: HostAdapter) -> None:
        if not isinstance(adapter, HostAdapter):
            raise TypeError("a host adapter has a name and an async delegate(request, context)")
        self._adapters[adapter.name] = adapter

    def get(self, name: str | None) -> HostAdapter | None:
        return self._adapters.get(name or self.default)

    def names(self) -> list[str]:
        return sorted(self._adapters)


def _steps(execution: Mapping[str, Any]) -> list[dict[str, Any]] | str:
    """The requested calls, or why there are none to run."""
    raw = execution.get("steps")
    if raw is None and "tool" in execution:
        raw = [{"tool": execution.get("tool"), "input": execution.get("input", {})}]
    if not isinstance(raw, list) or not raw:
        return "execution.steps must be a non-empty list of {tool, input}"
    if len(raw) > MAX_STEPS:
        return f"at most {MAX_STEPS} steps may be delegated at once"
    steps = []
    for index, step in enumerate(raw):
        if not isinstance(step, dict) or not isinstance(step.get("tool"), str):
            return f"execution.steps[{index}] must be an object with a tool name"
        tool_input = step.get("input", {})
        if not isinstance(tool_input, dict):
            return f"execution.steps[{index}].input must be an object"
        steps.append({"tool": step["tool"], "input": tool_input})
    return steps


class LocalRegistryAdapter:
    """Runs `execution.steps` through the registry pipeline, in order, stopping at the
    first step that does not succeed."""

    name = "local"

    async def delegate(
        self, request: HostDelegationRequest, context: DelegationContext
    ) -> Mapping[str, Any]:
        echo = {
            "request_id": request.request_id,
            "sandbox_session_id": request.sandbox_session_id,
            "session_id": request.session_id,
            "source_digest": request.digest,
        }
        echo = {k: v for k, v in echo.items() if v is not None}
        steps = _steps(request.execution)
        if isinstance(steps, str):
            return {
                **echo,
                "status": "failed",
                "error": {"code": "invalid_input", "message": steps, "retryable": False},
            }
        done: list[dict[str, Any]] = []
        for index, step in enumerate(steps):
            outcome = await context.call(
                step["tool"], step["input"], idempotency_key=f"{request.request_id}:{index}"
            )
            done.append(outcome.public())
            await context.emit({"step": index, "tool": step["tool"], "status": outcome.status})
            if not outcome.ok:
                error = outcome.error
                return {
                    **echo,
                    "status": "failed",
                    "result": {"steps": done},
                    "error": {
                        "code": error.code if error else "handler_error",
                        "message": f"step {index} ({step['tool']}): "
                        + (error.message if error else "did not succeed"),
                        "retryable": bool(error and error.retryable),
                    },
                }
        return {**echo, "status": "completed", "result": {"steps": done}}
