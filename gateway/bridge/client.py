"""The sandbox-side client of the parent tool bridge.

    client = BridgeClient.from_envelope(envelope, env=os.environ)
    result = await client.call("workspace.read", {"path": "README.md"})
    if result.ok: ...

The client reads the bridge envelope and the environment variables it names, builds
request envelopes, and hands them to the declared dispatcher (`host_endpoint` over HTTP,
`host_command` through a program's stdin/stdout). It never executes a tool itself: a
tool outside the envelope's `allowed_tools` is `denied` without leaving the sandbox, and a
dispatcher that is missing, unconfigured or unreachable is `unavailable`, never a reason
to run anything locally.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from gateway.bridge.dispatch import CommandDispatch, Dispatch, EndpointDispatch, unavailable
from gateway.bridge.envelopes import (
    ParentToolBridge,
    ParentToolRequest,
    ParentToolResult,
    RequestAuthorization,
    SandboxSession,
    failure,
)
from gateway.bridge.schemas import BRIDGE_SCHEMA
from gateway.bridge.validation import load_json, parse_envelope, validation_errors


class RequestOptions(TypedDict, total=False):
    """What a call may say beyond its tool and input: its `request_id` (reused, it replays
    a side-effect tool's recorded result), the `capability` it claims, the sandbox-side
    `caller_session_id`, and `metadata` passed through to the host."""

    request_id: str | None
    capability: str | None
    caller_session_id: str | None
    metadata: Mapping[str, Any] | None


def new_request_id() -> str:
    return f"ptr_{secrets.token_hex(12)}"


def load_bridge(envelope: ParentToolBridge | Mapping[str, Any] | str | bytes) -> ParentToolBridge:
    """A bridge envelope from its model, its JSON text or its decoded object.

    Raises EnvelopeInvalid when it is not a `wp-codebox/parent-tool-bridge/v1` envelope.
    """
    if isinstance(envelope, ParentToolBridge):
        return envelope
    data = load_json(envelope) if isinstance(envelope, str | bytes) else dict(envelope)
    return parse_envelope(ParentToolBridge, data, BRIDGE_SCHEMA)


class BridgeClient:
    def __init__(
        self,
        envelope: ParentToolBridge,
        env: Mapping[str, str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.envelope = envelope
        self.env = dict(env)
        self.transport = transport

    @classmethod
    def from_envelope(
        cls,
        envelope: ParentToolBridge | Mapping[str, Any] | str | bytes,
        env: Mapping[str, str] | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> BridgeClient:
        return cls(load_bridge(envelope), os.environ if env is None else env, transport=transport)

    @property
    def allowed_tools(self) -> list[str]:
        return list(self.envelope.allowed_tools)

    @property
    def timeout_s(self) -> float:
        return self.envelope.dispatcher.timeout_ms / 1000

    def request(
        self,
        tool: str,
        tool_input: Any = None,
        **options: Unpack[RequestOptions],
    ) -> ParentToolRequest:
        """The request envelope for one call (raises ValidationError if it cannot be one)."""
        request_id = options.get("request_id")
        metadata = options.get("metadata")
        meta = self.envelope.metadata
        task_id = meta.get("task_id")
        sandbox_id = meta.get("sandbox_id")
        return ParentToolRequest(
            request_id=request_id or new_request_id(),
            tool=tool,
            operation="call",
            # A non-object input is left as it is, for the model to refuse.
            input=dict(tool_input) if isinstance(tool_input, Mapping) else tool_input or {},
            sandbox_session=SandboxSession(
                sandbox_session_id=sandbox_id if isinstance(sandbox_id, str) else None,
                caller_session_id=options.get("caller_session_id"),
                task_id=task_id if isinstance(task_id, str) else None,
            ),
            authorization=RequestAuthorization(
                allowed_tools=list(self.envelope.allowed_tools),
                capability=options.get("capability"),
            ),
            metadata=dict(metadata or {}),
        )

    async def call(
        self,
        tool: str,
        tool_input: Any = None,
        **options: Unpack[RequestOptions],
    ) -> ParentToolResult:
        """Ask the host to run `tool`; always one result envelope, never an exception.

        Reusing a `request_id` replays a side-effect tool's recorded result.
        """
        request_id = options["request_id"] = options.get("request_id") or new_request_id()
        if tool not in self.envelope.allowed_tools:
            return failure(
                "denied",
                "forbidden",
                f"{tool[:128]!r} is not in this bridge's allowed_tools",
                request_id=request_id if len(request_id) <= 128 else "",
                tool=tool,
            )
        try:
            request = self.request(tool, tool_input, **options)
        except ValidationError as exc:
            return failure(
                "failed",
                "invalid_input",
                "the call cannot be expressed as a parent-tool request",
                request_id=request_id if len(request_id) <= 128 else "",
                tool=tool,
                diagnostics={"errors": validation_errors(exc)},
            )
        return await self.send(request)

    def call_sync(
        self,
        tool: str,
        tool_input: Any = None,
        *,
        request_id: str | None = None,
        capability: str | None = None,
    ) -> ParentToolResult:
        """`call` for synchronous code (runs its own event loop)."""
        return asyncio.run(
            self.call(tool, tool_input, request_id=request_id, capability=capability)
        )

    async def send(self, request: ParentToolRequest) -> ParentToolResult:
        dispatcher = self.dispatcher(request)
        if isinstance(dispatcher, ParentToolResult):
            return dispatcher
        return await dispatcher.send(request, self.timeout_s)

    def dispatcher(self, request: ParentToolRequest) -> Dispatch | ParentToolResult:
        """The configured transport, or the `unavailable` result saying what is missing."""
        spec = self.envelope.dispatcher
        if spec.mode == "host_command":
            assert spec.command is not None  # the envelope model requires it in this mode
            return CommandDispatch(spec.command.argv, self.env)
        assert spec.endpoint is not None
        url = self.env.get(spec.endpoint.url_env, "").strip()
        token = self.env.get(spec.endpoint.token_env, "").strip()
        if not url:
            return unavailable(
                request,
                f"{spec.endpoint.url_env} is not set: the parent dispatcher is not configured",
                retryable=False,
            )
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            return unavailable(
                request, f"{spec.endpoint.url_env} is not an http(s) URL", retryable=False
            )
        if not token:
            return unavailable(
                request,
                f"{spec.endpoint.token_env} is not set: the parent dispatcher is not configured",
                retryable=False,
            )
        return EndpointDispatch(url, token, transport=self.transport)
