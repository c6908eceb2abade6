"""An organization's share of a gateway's sandboxes (`GATEWAY_SANDBOX_MAX_LIVE_PER_ORG`),
over real HTTP with real sandboxes: past it a create is 429 `quota_exceeded` with the
numbers and starts nothing, its sandboxes already live keep serving, other organizations
are not affected, ending a task frees its place, and of concurrent creates at the share
exactly the free places are taken."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from gateway.sandbox.local import sandbox_processes
from gateway.testing import LiveGateway, live_gateway
from tests.sandbox.conftest import AppRepo, ask, provision_body, sandbox_settings

SHARE = 1


@pytest_asyncio.fixture
async def live(tmp_path: Path, app_repo: AppRepo) -> AsyncIterator[LiveGateway]:
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_max_live_per_org=SHARE)
    async with live_gateway(settings) as gateway:
        yield gateway


async def create(live: LiveGateway, commit: str, org: str) -> httpx.Response:
    body = {**provision_body(commit), "org_id": org}
    response = await live.http.post("/v1/tasks", json=body, headers=live.control)
    if response.status_code == 201:
        live.created.append(response.json()["task_id"])
    return response


def refused(response: httpx.Response, org: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert (error["code"], error["retryable"]) == ("quota_exceeded", False)
    assert error["details"] == {
        "quota": "live_sandboxes",
        "org_id": org,
        "limit": SHARE,
        "current": SHARE,
        "adding": 1,
    }
    assert f"its share of {SHARE}" in error["message"]


def sandbox_uids(live: LiveGateway) -> set[int]:
    base = live.gateway.settings.sandbox_uid_base
    return {
        base + slot
        for slot in range(live.gateway.settings.sandbox_max_live)
        if sandbox_processes(base + slot, None)
    }


async def test_an_organization_past_its_share_is_refused_and_keeps_its_sandbox(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    first = await create(live, app_repo.v1, "org_a")
    assert first.status_code == 201, first.text
    running = sandbox_uids(live)
    assert len(running) == 1

    refused(await create(live, app_repo.v1, "org_a"), "org_a")
    assert sandbox_uids(live) == running  # the refused create started nothing
    task_id = first.json()["task_id"]
    assert (await ask(live, task_id, "/version"))["version"] == "v1"

    # Another organization has a share of its own.
    assert (await create(live, app_repo.v2, "org_b")).status_code == 201
    # Ending the task frees its place.
    await live.end_task(task_id)
    assert (await create(live, app_repo.v1, "org_a")).status_code == 201


async def test_concurrent_creates_take_exactly_the_free_places(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    answers = await asyncio.gather(*(create(live, app_repo.v1, "org_c") for _ in range(3)))
    assert sorted(a.status_code for a in answers) == [201, 429, 429]
    assert len(sandbox_uids(live)) == 1  # the refused creates started nothing
    for answer in answers:
        if answer.status_code == 429:
            refused(answer, "org_c")
