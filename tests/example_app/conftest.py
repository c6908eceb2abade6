"""Fixtures for the example app: one started instance on a temporary data file."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from examples.synthetic_app import AppConfig, SyntheticApp
from examples.synthetic_app.control import AssistantTask, ControlPlane
from examples.synthetic_app.directory import USERS
from examples.synthetic_app.tools import install_product_tools
from gateway.app import Extension
from gateway.core.identity import TaskIdentity
from gateway.core.tokens import Purpose
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import free_port, serving
from gateway.settings import Settings
from gateway.tabs import install as install_tabs
from tests.conftest import Live

# The sandbox instance is not needed by these tests; the task names where it would be.
SANDBOX_ORIGIN = "http://127.0.0.1:9"


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[SyntheticApp]:
    app = SyntheticApp(
        AppConfig(
            instance="dashboard",
            data_path=tmp_path / "dashboard.db",
            secret="example-secret-for-tests-0123456789",
            step_s=0.01,
        )
    )
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@dataclass
class Stack:
    """A gateway (with the tab channel and the product tools) and the dashboard it serves."""

    live: Live
    app: SyntheticApp
    control: ControlPlane
    dashboard_url: str

    async def task(self, user_id: str, session: str | None = None) -> AssistantTask:
        """A task opened by the dashboard's control plane for this user's session."""
        return await self.control.task_for(session or f"sess-{user_id}", USERS[user_id])

    async def identity(self, task: AssistantTask) -> TaskIdentity:
        return await self.live.gateway.tasks.authenticate(task.agent_token, Purpose.AGENT)


def gateway_extensions() -> list[Extension]:
    """What the product tools need of a gateway: the task routes and the tab channel."""
    return [health.routes, tasks.routes, install_tabs]


@pytest.fixture
async def stack(
    settings: Settings, live_factory: Callable[..., Any], tmp_path: Path
) -> AsyncIterator[Stack]:
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    settings.dashboard_origins = [*settings.dashboard_origins, origin]
    app = SyntheticApp(
        AppConfig(
            instance="dashboard",
            data_path=tmp_path / "dashboard.db",
            secret="example-secret-for-tests-0123456789",
            step_s=0.02,
        )
    )

    def setup(gw: Gateway) -> None:
        install_product_tools(gw, app)

    async with live_factory(settings, setup=setup, extensions=gateway_extensions()) as live:
        assert settings.control_key is not None
        control = ControlPlane(live.base_url, settings.control_key, sandbox_origin=SANDBOX_ORIGIN)
        app.control = control
        async with serving(app.asgi(), port=port) as url:
            yield Stack(live, app, control, url)
