"""Fixtures of the task browser's tests: one Chromium for the session, the two-origin app,
and gateways that share that Chromium (each test gets its own gateway and store)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from gateway.browser import BrowserPool, BrowserProcesses, install
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ToolResult
from gateway.core.tasks.service import TaskCreate
from gateway.parts import browser_processes_config
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from gateway.testing import end_all_and_check_released, test_settings
from tests.browser.site import ForeignLog, allowed_app, foreign_app
from tests.conftest import task_body


def browser_settings(tmp: Path, **overrides: Any) -> Settings:
    return test_settings(tmp / "data", **{"browser_launch_at_start": True, **overrides})


def snapshot_ref(text: str, label: str) -> str:
    """The ref of the first element of a snapshot whose line names `label`."""
    for line in text.splitlines():
        if label in line and "[ref=" in line:
            return line.split("[ref=", 1)[1].split("]", 1)[0]
    raise AssertionError(f"no element {label!r} in the snapshot:\n{text}")


@dataclass
class Sites:
    allowed: str
    foreign: str
    log: ForeignLog


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def sites() -> AsyncIterator[Sites]:
    log = ForeignLog()
    async with serving(foreign_app(log)) as foreign, serving(allowed_app(foreign)) as allowed:
        yield Sites(allowed, foreign, log)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def task_chromium(tmp_path_factory: Any) -> AsyncIterator[BrowserProcesses]:
    processes = BrowserProcesses(
        browser_processes_config(browser_settings(tmp_path_factory.mktemp("chromium")))
    )
    await processes.start()
    yield processes
    await processes.close()


@dataclass
class BrowserGateway:
    gw: Gateway
    sites: Sites

    @property
    def pool(self) -> BrowserPool:
        return self.gw.services.get(BrowserPool)

    async def task(self, **kwargs: Any) -> TaskIdentity:
        kwargs.setdefault("app_origin", self.sites.allowed)
        kwargs.setdefault("scopes", ["browser"])
        identity, _tokens = await self.gw.tasks.create(
            TaskCreate.model_validate(task_body(**kwargs))
        )
        return identity

    async def call(self, identity: TaskIdentity, tool: str, **args: Any) -> ToolResult:
        return await self.gw.pipeline.call(identity, tool, args, door=Door.INTERNAL)

    async def evidence(self, identity: TaskIdentity, kind: str) -> list[dict[str, Any]]:
        """The task's records of one kind; an aggregate of a flood counts as its samples."""
        await self.gw.events.flush(identity.task_id)
        records = await self.gw.store.evidence_for(identity.org_id, identity.task_id)
        found: list[dict[str, Any]] = []
        for record in records:
            if record.get("kind") != kind:
                continue
            if (record.get("data") or {}).get("aggregate"):
                found += [{**record, "data": sample} for sample in record["data"]["samples"]]
            else:
                found.append(record)
        return found


@contextlib.asynccontextmanager
async def browser_gateway(
    tmp_path: Path, sites: Sites, processes: BrowserProcesses | None = None, **overrides: Any
) -> AsyncIterator[BrowserGateway]:
    """A started gateway with the task browser; on the session's Chromium when given, else
    with Chromium processes (or a remote server) of its own, as `overrides` say. On the way
    out its tasks are ended, and nothing may still be held for one."""
    gw = Gateway(browser_settings(tmp_path, **overrides))
    if processes is not None:
        gw.services.provide(BrowserProcesses, processes)
    install(gw)
    await gw.start()
    try:
        yield BrowserGateway(gw, sites)
        await end_all_and_check_released(gw)
    finally:
        await gw.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def browsers(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> AsyncIterator[BrowserGateway]:
    async with browser_gateway(tmp_path, sites, task_chromium) as b:
        sites.log.requests.clear()
        yield b
