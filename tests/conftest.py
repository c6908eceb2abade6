"""Shared fixtures: a real gateway on a loopback port, and a control-plane client.

The gateways come from `gateway.testing`, as the end-to-end suites' and the benches' do;
each checks on its way out that nothing is still held for a task that has ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.settings import Settings
from gateway.testing import LiveGateway, live_gateway, task_body, test_settings

__all__ = ["APP_ORIGIN", "Live", "LiveFactory", "task_body"]

APP_ORIGIN = "http://127.0.0.1:9"

Live = LiveGateway
LiveFactory = Callable[..., contextlib.AbstractAsyncContextManager[LiveGateway]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return test_settings(tmp_path / "data", dashboard_origins=["http://127.0.0.1:8765"])


@pytest.fixture
def live_factory() -> LiveFactory:
    """Start gateways on demand: `async with live_factory(settings, setup=...) as live`."""
    return live_gateway


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[LiveGateway]:
    async with live_gateway(settings) as running:
        yield running
