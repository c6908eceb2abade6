"""The task browser on a provisioned app: reached through the task's guard proxy at the
sandbox's own origin (its unix socket, no name resolved), refused to other tasks, and
`unavailable`/`sandbox_unavailable` while the app is down. Real Chromium, real bubblewrap."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gateway.browser import BrowserProcesses
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ToolResult
from gateway.core.tasks.service import TaskCreate
from gateway.sandbox.local import LocalSandbox, sandbox_processes
from gateway.sandbox.provider import SandboxState
from gateway.sandbox.service import Sandboxes
from gateway.testing import LiveGateway, live_gateway
from tests.browser.conftest import task_chromium
from tests.sandbox.conftest import AppRepo, provision_body, sandbox_settings

__all__ = ["task_chromium"]

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def live(
    tmp_path: Path, app_repo: AppRepo, task_chromium: BrowserProcesses
) -> AsyncIterator[LiveGateway]:
    settings = sandbox_settings(tmp_path / "data", app_repo)
    async with live_gateway(
        settings, setup=lambda gw: gw.services.provide(BrowserProcesses, task_chromium)
    ) as gateway:
        yield gateway


async def task(live: LiveGateway, body: dict[str, Any]) -> TaskIdentity:
    identity, _tokens = await live.gateway.tasks.create(TaskCreate.model_validate(body))
    return identity


async def call(live: LiveGateway, identity: TaskIdentity, tool: str, **args: Any) -> ToolResult:
    return await live.gateway.pipeline.call(identity, tool, args, door=Door.INTERNAL)


async def until(sandbox: LocalSandbox, state: SandboxState) -> None:
    for _ in range(1200):
        if sandbox.state is state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the sandbox stayed {sandbox.state}, not {state}")


async def until_not(sandbox: LocalSandbox, state: SandboxState) -> None:
    for _ in range(1200):
        if sandbox.state is not state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the sandbox stayed {state}")


def crash(sandbox: LocalSandbox) -> None:
    """The app's processes killed from outside, as a crash or the OOM killer would."""
    for pid in sandbox_processes(sandbox.uid, None):
        os.kill(pid, signal.SIGKILL)


async def test_the_browser_reaches_its_own_sandbox_and_no_other(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    mine = await task(live, provision_body(app_repo.v1))
    theirs = await task(live, provision_body(app_repo.v2))
    opened = await call(live, mine, "browser.navigate", url="/version")
    assert opened.ok, opened
    assert opened.output["url"] == f"{mine.sandbox.app_origin}/version"
    assert (
        '\\"version\\": \\"v1\\"' in opened.output["snapshot"] or "v1" in opened.output["snapshot"]
    )
    # Another task's sandbox is not one of this task's origins.
    refused = await call(live, mine, "browser.navigate", url=f"{theirs.sandbox.app_origin}/")
    assert refused.status == "denied" and refused.error is not None
    assert refused.error.code == "origin_blocked"
    other = await call(live, theirs, "browser.navigate", url="/version")
    assert other.ok and "v2" in other.output["snapshot"], other


async def test_a_dead_app_is_unavailable_then_restarted_once_then_down(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    identity = await task(live, provision_body(app_repo.v1))
    sandbox = live.gateway.services.get(Sandboxes).handle_of(identity.task_id)
    assert isinstance(sandbox, LocalSandbox)
    assert (await call(live, identity, "browser.navigate", url="/version")).ok

    # The app dies mid-task.
    crash(sandbox)
    await until_not(sandbox, SandboxState.HEALTHY)
    died = await call(live, identity, "browser.navigate", url="/version")
    assert died.status == "unavailable", died
    assert died.error is not None and died.error.code == "sandbox_unavailable"
    while sandbox.state is SandboxState.RESTARTING:
        during = await call(live, identity, "browser.snapshot")
        if sandbox.state is not SandboxState.RESTARTING:
            break
        assert during.error is not None and during.error.code == "sandbox_unavailable"
        assert during.error.retryable
        await asyncio.sleep(0.05)
    await until(sandbox, SandboxState.HEALTHY)
    again = await call(live, identity, "browser.navigate", url="/version")
    assert again.ok and "v1" in again.output["snapshot"], again
    assert sandbox.restarts == 1

    # Once restarted, a second death is final.
    crash(sandbox)
    await until(sandbox, SandboxState.DOWN)
    down = await call(live, identity, "browser.navigate", url="/version")
    assert down.status == "unavailable" and down.error is not None
    assert (down.error.code, down.error.retryable) == ("sandbox_unavailable", False)
    kinds = [r["kind"] for r in await live.evidence(identity.task_id) if "sandbox" in r["kind"]]
    assert kinds == [
        "sandbox-manifest/v1",
        "sandbox.restarting",
        "sandbox.healthy",
        "sandbox.down",
    ]
    # Down is down: nothing of the app runs any more (counted from /proc).
    assert sandbox_processes(sandbox.uid, sandbox.pid_namespace) == []
