"""Sandboxes on Incus across the nodes of a cluster: the sandbox is Incus's, not a node's.

Two gateway nodes in one process on a real PostgreSQL, NATS and Incus, each with its task
browser: a task provisioned on node A moves to node B, whose browser reaches the same app
(same container, same data); A lets go of it without touching it; the task's end on B
tears it down once, and A, hearing the end, does not tear down or archive it again.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gateway.app import build_gateway
from gateway.browser import BrowserProcesses
from gateway.browser.extension import install as install_browser
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ToolResult
from gateway.core.tasks.service import TaskCreate
from gateway.runtime import Gateway
from gateway.sandbox.extension import install as install_sandboxes
from gateway.sandbox.incus_sandbox import IncusSandbox
from gateway.sandbox.service import Sandboxes
from gateway.testing.waiting import until
from tests.browser.conftest import task_chromium
from tests.cluster.test_nodes import nats, node_of, node_settings, shared
from tests.sandbox.conftest import (
    INCUS_DEPLOYMENT,
    AppRepo,
    app_repo,
    incus_socket,
    provision_body,
)
from tests.servers.nats import NatsServer

__all__ = ["app_repo", "incus_socket", "nats", "shared", "task_chromium"]

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


class IncusNodes:
    def __init__(
        self, tmp_path: Path, shared: dict[str, Any], nats: NatsServer, extra: dict[str, Any]
    ) -> None:
        self.tmp_path, self.shared, self.nats, self.extra = tmp_path, shared, nats, extra
        self.gateways: dict[str, Gateway] = {}

    async def start(self, name: str, chromium: BrowserProcesses) -> Gateway:
        settings = node_settings(self.tmp_path, name, {**self.shared, **self.extra}, self.nats)
        gw = build_gateway(settings)
        gw.services.provide(BrowserProcesses, chromium)
        for extension in (install_sandboxes, install_browser):
            extension(gw)
        await gw.start()
        self.gateways[name] = gw
        return gw

    async def close(self) -> None:
        for gw in self.gateways.values():
            for task_id in gw.tasks.live_ids():
                await gw.tasks.end(task_id, "the test is over")
        for gw in reversed(list(self.gateways.values())):
            await gw.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def incus_nodes(
    tmp_path: Path,
    shared: dict[str, Any],
    nats: NatsServer,
    app_repo: AppRepo,
    incus_socket: str,
) -> AsyncIterator[IncusNodes]:
    extra = {
        "sandbox_incus": {"socket": incus_socket, "deployment": INCUS_DEPLOYMENT},
        "sandbox_repositories": {
            "probe": {
                "path": str(app_repo.path),
                "command": ["{python}", "app.py"],
                "health_path": "/healthz",
                "ready_timeout_s": 60,
            }
        },
    }
    nodes = IncusNodes(tmp_path, shared, nats, extra)
    try:
        yield nodes
    finally:
        await nodes.close()


async def call(gw: Gateway, identity: TaskIdentity, tool: str, **args: Any) -> ToolResult:
    return await gw.calls.call(identity, tool, args, door=Door.MCP)


def container_exists(name: str) -> bool:
    done = subprocess.run(["incus", "info", name], capture_output=True, check=False)
    return done.returncode == 0


def evidence_kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in records if str(r["kind"]).startswith("sandbox")]


async def test_a_task_provisioned_on_one_node_keeps_its_sandbox_on_another(
    incus_nodes: IncusNodes, app_repo: AppRepo, task_chromium: BrowserProcesses
) -> None:
    a = await incus_nodes.start("node-a", task_chromium)
    b = await incus_nodes.start("node-b", task_chromium)
    body = provision_body(app_repo.v1, provider="incus", keep_data=True)
    identity, _tokens = await a.tasks.create(TaskCreate.model_validate(body))
    sandbox = a.services.get(Sandboxes).handle_of(identity.task_id)
    assert isinstance(sandbox, IncusSandbox)

    # On node A: the app is the task's, and leaves a note in its data.
    await node_of(a).take(identity.task_id)
    first = await call(a, identity, "browser.navigate", url="/write?path=/data/from-a")
    assert first.ok and "written" in first.output["snapshot"], first

    # The task moves to node B (its tab, or A's death, would do the same): A lets go of
    # the sandbox without touching it, and B's browser reaches the same container.
    await node_of(b).take(identity.task_id)
    await until(
        lambda: a.services.get(Sandboxes).handle_of(identity.task_id) is None,
        what="node A to let go of the sandbox",
    )
    assert container_exists(sandbox.name)
    # The browser context was A's: B says so once (the page state is lost), then opens
    # its own, which reaches the same app.
    moved = await call(b, identity, "browser.navigate", url="/list?path=/data")
    assert moved.error is not None and moved.error.retryable, moved
    there = await call(b, identity, "browser.navigate", url="/list?path=/data")
    assert there.ok, there
    assert "from-a" in there.output["snapshot"]
    on_b = b.services.get(Sandboxes).handle_of(identity.task_id)
    assert isinstance(on_b, IncusSandbox) and on_b.name == sandbox.name
    version = await call(b, identity, "browser.navigate", url="/version")
    assert version.ok and "v1" in version.output["snapshot"], version

    # The end on B tears it down once: the container, its socket and folder are gone, one
    # archive of its data is kept, and A (which hears the end) adds nothing.
    await b.tasks.end(identity.task_id, "done")
    await until(lambda: not container_exists(sandbox.name), what="the container to go")
    assert not sandbox.socket_path.exists() and not sandbox.folder.exists()
    await asyncio.sleep(0.5)  # A's end listener, had it torn anything down, has run
    records = await b.store.evidence_for(identity.org_id, identity.task_id, limit=200)
    kinds = evidence_kinds(records)
    assert kinds.count("sandbox.torn_down") == 1, kinds
    [ended] = [r for r in records if r["kind"] == "sandbox.torn_down"]
    assert ended["data"]["processes_left"] == 0
    assert "artifact_id" in ended["data"]["data"], json.dumps(ended["data"])
