"""Bridge fixtures: a live gateway with probe tools, a task, and clients in both modes."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from gateway.app import Extension
from gateway.bridge import BridgeClient, ParentToolBridge, as_host_command, install, load_bridge
from gateway.bridge.schemas import ENDPOINT_ENV, TOKEN_ENV
from gateway.core.errors import ToolFailure
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.conftest import Live

FIXTURES = Path(__file__).parent / "fixtures"
# The core routes and the bridge: the other doors have nothing to do with these tests and
# would only make every gateway slower to start.
EXTENSIONS: list[Extension] = [health.routes, tasks.routes, install]
MODES = ("host_endpoint", "host_command")

# The probe task may call these; `test.secret` is registered and in scope but left off
# its allowlist, so only the allowlist stands between a caller and its handler.
ALLOWED = ["test.echo", "test.slow", "test.boom", "test.down", "test.count", "workspace.*"]
SCOPES = ("test", "workspace:read", "workspace:write")


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


class Text(BaseModel):
    model_config = ConfigDict(extra="allow")
    text: str = ""


class Slow(BaseModel):
    seconds: float = 30


class Empty(BaseModel):
    pass


@dataclass
class HandlerRuns:
    """Counts handler runs: a test can show that a handler never ran."""

    runs: Counter[str] = field(default_factory=Counter)


def add_probe_tools(gw: Gateway, probe: HandlerRuns) -> None:
    def tool(name: str, model: type[BaseModel], handler: Any, **kw: Any) -> None:
        async def run(ctx: ToolContext, args: Any) -> Any:
            probe.runs[name] += 1
            return await handler(ctx, args)

        gw.registry.add(
            Tool(
                name=name,
                title=name,
                description=f"probe tool {name}",
                input_model=model,
                handler=run,
                scopes=frozenset({"test"}),
                **kw,
            )
        )

    async def echo(_ctx: ToolContext, args: Text) -> dict[str, Any]:
        return {"echo": args.model_dump()}

    async def slow(_ctx: ToolContext, args: Slow) -> dict[str, Any]:
        await asyncio.sleep(args.seconds)
        return {"slept": args.seconds}

    async def boom(_ctx: ToolContext, _args: Empty) -> None:
        raise RuntimeError("the probe tool broke")

    async def down(_ctx: ToolContext, _args: Empty) -> None:
        raise ToolFailure(
            ToolStatus.UNAVAILABLE, ErrorCode.TAB_UNAVAILABLE, "no tab", retryable=True
        )

    async def count(_ctx: ToolContext, args: Text) -> dict[str, Any]:
        return {"count": probe.runs["test.count"], "text": args.text}

    tool("test.echo", Text, echo)
    tool("test.slow", Slow, slow, timeout_s=2.0)
    tool("test.boom", Empty, boom)
    tool("test.down", Empty, down)
    tool("test.secret", Text, echo)
    tool("test.count", Text, count, side_effects=True)


@dataclass
class BridgeSetup:
    live: Live
    probe: HandlerRuns
    task: dict[str, Any]

    @property
    def gw(self) -> Gateway:
        return self.live.gateway

    @property
    def envelope(self) -> ParentToolBridge:
        return load_bridge(self.task["parent_tool_bridge"])

    @property
    def env(self) -> dict[str, str]:
        """The sandbox's environment, as a control plane would inject it."""
        return {
            **os.environ,
            ENDPOINT_ENV: f"{self.live.base_url}/v1/parent-tools",
            TOKEN_ENV: self.task["tokens"]["bridge"],
        }

    @property
    def bridge_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.task['tokens']['bridge']}"}

    def client(
        self,
        mode: str = "host_endpoint",
        *,
        timeout_ms: int | None = None,
        env: dict[str, str] | None = None,
    ) -> BridgeClient:
        envelope = self.envelope
        if mode == "host_command":
            envelope = as_host_command(envelope)
        if timeout_ms is not None:
            dispatcher = envelope.dispatcher.model_copy(update={"timeout_ms": timeout_ms})
            envelope = envelope.model_copy(update={"dispatcher": dispatcher})
        return BridgeClient.from_envelope(envelope, self.env if env is None else env)


@pytest.fixture
async def bridge(
    settings: Settings, live_factory: Callable[..., Any]
) -> AsyncIterator[BridgeSetup]:
    probe = HandlerRuns()
    async with live_factory(
        settings, setup=lambda gw: add_probe_tools(gw, probe), extensions=EXTENSIONS
    ) as live:
        task = await live.create_task(scopes=SCOPES, allowed_tools=ALLOWED)
        yield BridgeSetup(live, probe, task)
