"""Shared fixtures: a real gateway on a loopback port, and a control-plane client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import BaseRoute

from gateway.app import Extension, build_app, default_extensions
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings

APP_ORIGIN = "http://127.0.0.1:9"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        secret_keys=["k-test-newest-0123456789abcdef", "k-test-older-0123456789abcdef"],
        control_key="control-key-for-tests-0123456789",
        dashboard_origins=["http://127.0.0.1:8765"],
        example=False,
        # Most tests of a full gateway never open a task browser: launch it on first use.
        browser_launch_at_start=False,
    )


def task_body(
    *,
    org: str = "org_a",
    actor: str = "user_1",
    role: str = "admin",
    scopes: Sequence[str] = ("ui", "browser", "workspace:read", "workspace:write"),
    allowed_tools: Sequence[str] | None = None,
    app_origin: str = APP_ORIGIN,
    allowed_origins: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "actor": {"id": actor, "role": role},
        "org_id": org,
        "sandbox": {
            "id": f"sb_{org}",
            "app_origin": app_origin,
            "allowed_origins": list(allowed_origins),
        },
        "scopes": list(scopes),
        **extra,
    }
    if allowed_tools is not None:
        body["allowed_tools"] = list(allowed_tools)
    return body


@dataclass
class Live:
    """A gateway served on loopback, with a control-plane client."""

    base_url: str
    gateway: Gateway
    http: httpx.AsyncClient

    @property
    def control(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.gateway.settings.control_key}"}

    async def create_task(self, **kwargs: Any) -> dict[str, Any]:
        response = await self.http.post("/v1/tasks", json=task_body(**kwargs), headers=self.control)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    async def end_task(self, task_id: str) -> None:
        response = await self.http.delete(f"/v1/tasks/{task_id}", headers=self.control)
        assert response.status_code == 200, response.text


LiveFactory = Callable[..., contextlib.AbstractAsyncContextManager[Live]]


@pytest.fixture
def live_factory() -> LiveFactory:
    """Start gateways on demand: `async with live_factory(settings, setup=...) as live`."""

    @contextlib.asynccontextmanager
    async def start(
        settings: Settings,
        *,
        setup: Callable[[Gateway], None] | None = None,
        extensions: Sequence[Extension] | None = None,
        extra_routes: Sequence[BaseRoute] = (),
    ) -> AsyncIterator[Live]:
        gw = Gateway(settings)
        if setup is not None:
            setup(gw)
        exts = list(extensions if extensions is not None else default_extensions())
        if extra_routes:
            exts.append(lambda _gw: list(extra_routes))
        app = build_app(gateway=gw, extensions=exts)
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            yield Live(base_url, gw, client)

    return start


@pytest.fixture
async def live(settings: Settings, live_factory: Callable[..., Any]) -> AsyncIterator[Live]:
    async with live_factory(settings) as running:
        yield running
