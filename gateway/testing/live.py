"""A real gateway on a free loopback port, with a control-plane client, for tests and benches."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.routing import BaseRoute

from gateway.app import Extension, build_app, build_gateway, default_extensions
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from gateway.testing.leaks import leaks

LEAK_GRACE_S = 5.0


def task_body(
    *,
    org: str = "org_a",
    actor: str = "user_1",
    role: str = "admin",
    scopes: Sequence[str] = ("ui", "browser", "workspace:read", "workspace:write"),
    allowed_tools: Sequence[str] | None = None,
    app_origin: str = "http://127.0.0.1:9",
    allowed_origins: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A `POST /v1/tasks` body; every field can be changed."""
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
class LiveGateway:
    """A gateway served on loopback, with a control-plane client."""

    base_url: str
    gateway: Gateway
    http: httpx.AsyncClient
    created: list[str] = field(default_factory=list)

    @property
    def control(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.gateway.settings.control_key}"}

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/v1/tabs"

    async def create_task(self, **kwargs: Any) -> dict[str, Any]:
        response = await self.http.post("/v1/tasks", json=task_body(**kwargs), headers=self.control)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        self.created.append(body["task_id"])
        return body

    async def end_task(self, task_id: str) -> None:
        response = await self.http.delete(f"/v1/tasks/{task_id}", headers=self.control)
        assert response.status_code == 200, response.text

    async def evidence(self, task_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        response = await self.http.get(f"/v1/tasks/{task_id}/evidence", headers=self.control)
        records: list[dict[str, Any]] = response.json()["records"]
        return [r for r in records if kind is None or r.get("kind") == kind]


@contextlib.asynccontextmanager
async def live_gateway(
    settings: Settings,
    *,
    setup: Callable[[Gateway], None] | None = None,
    extensions: Sequence[Extension] | None = None,
    extra_routes: Sequence[BaseRoute] = (),
    check_leaks: bool = True,
) -> AsyncIterator[LiveGateway]:
    """Serve a gateway until the block ends. On the way out every task still live is ended,
    and with `check_leaks` the block fails if the gateway still holds anything for one."""
    gw = build_gateway(settings)
    if setup is not None:
        setup(gw)
    exts = list(extensions if extensions is not None else default_extensions())
    if extra_routes:
        exts.append(lambda _gw: list(extra_routes))
    app = build_app(gateway=gw, extensions=exts)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        live = LiveGateway(base_url, gw, client)
        yield live
        await end_all_and_check_released(gw, check=check_leaks)


async def end_all_and_check_released(gw: Gateway, *, check: bool = True) -> None:
    """End every task still live, then wait (briefly: closing is asynchronous) until
    nothing is held for an ended task; fail naming what is."""
    for task_id in gw.tasks.live_ids():
        await gw.tasks.end(task_id, "the test is over")
    if not check:
        return
    left = leaks(gw)
    for _ in range(int(LEAK_GRACE_S / 0.05)):
        if not left:
            return
        await asyncio.sleep(0.05)
        left = leaks(gw)
    raise AssertionError("held after their tasks ended: " + ", ".join(map(str, left)))
