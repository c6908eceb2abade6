"""Agents a test drives the gateway with, synchronously, through each door.

- `McpAgent`: the official MCP SDK client on the MCP door, with the task's agent token.
- `BridgeAgent`: the sandbox-side bridge client, with the task's bridge envelope and token.
- `WebMcpAgent`: a browser agent calling the tools the dashboard page registers with
  Chromium's WebMCP (Playwright's `page.webmcp`).

Each `call` answers the gateway's result envelope as a dict (`tool`, `status`, `output`,
`error`), whatever the door, so one script can be run through any of them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from gateway.bridge.client import BridgeClient, load_bridge
from gateway.bridge.offer import sandbox_env_values
from gateway.core.registry import exposed_name
from gateway.testing.control import GatewayTask
from gateway.testing.loop_thread import LoopThread

CALL_TIMEOUT_S = 120.0


class Agent(Protocol):
    door: str

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]: ...


class McpAgent:
    """An MCP client session for one task, open until `close`."""

    door = "mcp"

    def __init__(
        self,
        loop: LoopThread,
        base_url: str,
        task: GatewayTask,
        *,
        elicitation_callback: Callable[..., Any] | None = None,
    ) -> None:
        self._loop = loop
        self._client, self._leave = loop.enter(
            _sdk_client(base_url, task.agent_token, elicitation_callback), timeout=CALL_TIMEOUT_S
        )

    def tools(self) -> list[Any]:
        """The tools as the SDK lists them (name, description, input schema...)."""
        listed = self._loop.run(self._client.list_tools(), timeout=CALL_TIMEOUT_S)
        return list(listed.tools)

    def list_tools(self) -> list[str]:
        """The names the client sees (client-safe: `browser_navigate`)."""
        return [tool.name for tool in self.tools()]

    def call_result(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """The SDK's own `CallToolResult` (its content blocks: text, images, resources)."""
        return self._loop.run(
            self._client.call_tool(exposed_name(tool), arguments or {}), timeout=CALL_TIMEOUT_S
        )

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call_result(tool, arguments)
        envelope: dict[str, Any] = dict(result.structured_content or {})
        return envelope

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._leave(30)


def mcp_session(base_url: str, token: str) -> contextlib.AbstractAsyncContextManager[Any]:
    """The official SDK's client on the MCP door with the task's agent token, for several
    calls (`await session.call_tool(name, args)`)."""
    return _sdk_client(base_url, token, None)


@contextlib.asynccontextmanager
async def _sdk_client(
    base_url: str, token: str, elicitation_callback: Callable[..., Any] | None
) -> AsyncIterator[Any]:
    """The official SDK's client on the MCP door, with the task's agent token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from mcp import Client

    options: dict[str, Any] = {}
    if elicitation_callback is not None:
        options["elicitation_callback"] = elicitation_callback
    async with (
        httpx2.AsyncClient(
            headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(CALL_TIMEOUT_S)
        ) as http,
        Client(streamable_http_client(f"{base_url}/v1/mcp", http_client=http), **options) as client,
    ):
        yield client


def bridge_client(base_url: str, task: GatewayTask) -> BridgeClient:
    """The parent-bridge client a sandboxed runtime of the task holds, aimed at `base_url`.

    The envelope names the gateway by its configured address; the caller reaches it at
    `base_url` (a free port, the --gateway-url it was given, one node of a cluster)."""
    envelope = load_bridge(task.bridge_envelope)
    env = sandbox_env_values(envelope, task.bridge_token)
    for name, value in env.items():
        if value.startswith(("http://", "https://")):
            env[name] = base_url.rstrip("/") + urlsplit(value).path
    return BridgeClient(envelope, env)


async def mcp_call(base_url: str, token: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """One call by the official MCP client in a session of its own, as an agent makes it."""
    async with _sdk_client(base_url, token, None) as client:
        result = await client.call_tool(exposed_name(tool), args)
    envelope: dict[str, Any] = dict(result.structured_content or {})
    return envelope


class BridgeAgent:
    """The parent-bridge client a sandboxed runtime holds for one task."""

    door = "bridge"

    def __init__(self, loop: LoopThread, base_url: str, task: GatewayTask) -> None:
        self._loop = loop
        self.client = bridge_client(base_url, task)

    @property
    def allowed_tools(self) -> list[str]:
        return self.client.allowed_tools

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *, request_id: str | None = None
    ) -> dict[str, Any]:
        result = self._loop.run(
            self.client.call(tool, arguments or {}, request_id=request_id),
            timeout=CALL_TIMEOUT_S,
        )
        envelope: dict[str, Any] = result.model_dump(mode="json", by_alias=True)
        return envelope


class WebMcpAgent:
    """A browser agent on the dashboard page: Chromium's WebMCP lists and calls the tools
    the shim registered there (the page's own door to the gateway).

    Chromium reports a tool that threw without its message, so for a call that did not
    succeed the result is read from the task's evidence (`calls`), where the gateway
    recorded its status and error."""

    door = "webmcp"

    def __init__(
        self, page: Any, calls: Callable[[str], list[dict[str, Any]]] | None = None
    ) -> None:
        self.page = page
        self._calls = calls

    def list_tools(self) -> list[str]:
        return [tool["name"] for tool in self.page.webmcp.tools()]

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        seen = len(self._calls(tool)) if self._calls is not None else 0
        try:
            output = self.page.webmcp.call_tool(exposed_name(tool), arguments or {})
        except Exception as exc:
            recorded = self._calls(tool)[seen:] if self._calls is not None else []
            if recorded:
                last = recorded[-1]
                return {"tool": tool, "status": last["status"], "error": last.get("error")}
            return {"tool": tool, "status": "failed", "error": {"message": str(exc)[:500]}}
        if isinstance(output, str):
            with contextlib.suppress(ValueError):
                output = json.loads(output)
        return {"tool": tool, "status": "succeeded", "output": output}
