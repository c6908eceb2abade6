"""A gateway with test tools, and an official MCP SDK client that talks to it over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, Field

from gateway import mcp_door
from gateway.core.errors import ToolFailure
from gateway.core.registry import ToolAnnotations, ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.settings import Settings
from mcp import Client
from tests.conftest import Live


class Empty(BaseModel):
    pass


class FailInput(BaseModel):
    status: ToolStatus
    code: str = Field(max_length=64)


class ProgressInput(BaseModel):
    steps: int = Field(ge=1, le=10)


class WriteInput(BaseModel):
    note: str = Field(max_length=100)


class LongInput(BaseModel):
    wait: bool = False
    end_as: ToolStatus | None = None


@dataclass
class ToolsSeen:
    """What the test tools saw, for assertions from the test side."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    ui_reply: asyncio.Event = field(default_factory=asyncio.Event)
    writes: list[str] = field(default_factory=list)
    identities: list[str] = field(default_factory=list)


def register_test_tools(gw: Gateway, probe: ToolsSeen) -> None:
    reg = gw.registry

    @reg.tool(
        "test.noop",
        title="No-op",
        description="Returns at once.",
        input_model=Empty,
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def noop(ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        probe.identities.append(ctx.identity.task_id)
        return {"ok": True}

    @reg.tool("test.fail", title="Fail", description="Ends with a status.", input_model=FailInput)
    async def fail(_ctx: ToolContext, args: FailInput) -> None:
        raise ToolFailure(args.status, args.code, f"asked to end as {args.status}")

    @reg.tool("test.crash", title="Crash", description="Raises.", input_model=Empty)
    async def crash(_ctx: ToolContext, _args: Empty) -> None:
        raise RuntimeError("boom")

    @reg.tool(
        "test.slow",
        title="Slow",
        description="Outlives its deadline.",
        input_model=Empty,
        timeout_s=0.2,
    )
    async def slow(_ctx: ToolContext, _args: Empty) -> None:
        await asyncio.sleep(30)

    @reg.tool("test.wait_ui", title="Wait", description="Waits on a UI reply.", input_model=Empty)
    async def wait_ui(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        probe.started.set()
        try:
            await probe.ui_reply.wait()
        except asyncio.CancelledError:
            probe.cancelled.set()
            raise
        return {"replied": True}

    @reg.tool(
        "test.long",
        title="Long",
        description="Waits on a UI reply if asked, then ends as asked.",
        input_model=LongInput,
        long_running=True,
    )
    async def long(ctx: ToolContext, args: LongInput) -> dict[str, Any]:
        probe.identities.append(ctx.identity.task_id)
        if args.wait:
            probe.started.set()
            try:
                await probe.ui_reply.wait()
            except asyncio.CancelledError:
                probe.cancelled.set()
                raise
        if args.end_as is not None:
            raise ToolFailure(args.end_as, "asked", f"asked to end as {args.end_as}")
        return {"waited": args.wait}

    @reg.tool(
        "test.progress", title="Steps", description="Reports progress.", input_model=ProgressInput
    )
    async def progress(ctx: ToolContext, args: ProgressInput) -> dict[str, Any]:
        for step in range(1, args.steps + 1):
            await asyncio.sleep(0.01)
            await ctx.report_progress(step, args.steps, f"step {step}")
        return {"steps": args.steps}

    @reg.tool(
        "test.write",
        title="Write",
        description="A side effect.",
        input_model=WriteInput,
        side_effects=True,
        annotations=ToolAnnotations(consequential_hint=True),
    )
    async def write(_ctx: ToolContext, args: WriteInput) -> dict[str, Any]:
        probe.writes.append(args.note)
        return {"written": len(probe.writes)}

    @reg.tool(
        "test.admin", title="Admin", description="Admins only.", input_model=Empty, roles=["admin"]
    )
    async def admin(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        return {"admin": True}

    @reg.tool(
        "test.secret",
        title="Secret",
        description="Needs a scope.",
        input_model=Empty,
        scopes=["secret"],
    )
    async def secret(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        return {"secret": True}


@dataclass
class DoorLive:
    live: Live
    probe: ToolsSeen

    @property
    def url(self) -> str:
        return f"{self.live.base_url}/v1/mcp"

    @contextlib.asynccontextmanager
    async def client(
        self, token: str, *, mode: str = "auto", **options: Any
    ) -> AsyncIterator[Client]:
        """The official SDK client; `auto` speaks the 2026 protocol, `legacy` the handshake.
        `options` go to the SDK's `Client` (an `elicitation_callback`...)."""
        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
            Client(
                streamable_http_client(self.url, http_client=http), mode=mode, **options
            ) as client,
        ):
            yield client

    async def evidence(self, task_id: str) -> list[dict[str, Any]]:
        response = await self.live.http.get(
            f"/v1/tasks/{task_id}/evidence", headers=self.live.control
        )
        assert response.status_code == 200, response.text
        records: list[dict[str, Any]] = response.json()["records"]
        return records


@pytest.fixture
async def door(settings: Settings, live_factory: Callable[..., Any]) -> AsyncIterator[DoorLive]:
    probe = ToolsSeen()
    # Only the parts the door needs: the core routes and the door itself.
    async with live_factory(
        settings,
        setup=lambda gw: register_test_tools(gw, probe),
        extensions=[health.routes, tasks.routes, mcp_door.install],
    ) as live:
        yield DoorLive(live, probe)


MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])
ALL_FAILURES = [
    (ToolStatus.DENIED, ErrorCode.FORBIDDEN),
    (ToolStatus.UNAVAILABLE, ErrorCode.TAB_UNAVAILABLE),
    (ToolStatus.TIMEOUT, ErrorCode.TIMEOUT),
    (ToolStatus.FAILED, ErrorCode.HANDLER_ERROR),
]
