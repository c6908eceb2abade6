"""Live tasks per organization, from the control plane's side, over real HTTP.

An organization at `max_live_tasks_per_org` is refused a new task with 429
`quota_exceeded` (its limit and count in the message and the details); its tasks already
live are untouched; ending one, or one expiring, frees a slot; other organizations are not
affected; concurrent creates admit exactly the free slots; and the count is the store's,
so it holds across a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import Extension, build_app
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from gateway.testing import task_body, test_settings
from tests.conftest import Live, LiveFactory

LIMIT = 5
# The task routes are all these tests need; the other doors would only slow each start.
EXTENSIONS: list[Extension] = [health.routes, tasks.routes]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return test_settings(tmp_path / "data", max_live_tasks_per_org=LIMIT)


@pytest.fixture
async def live(settings: Settings, live_factory: LiveFactory) -> AsyncIterator[Live]:
    async with live_factory(settings, extensions=EXTENSIONS) as running:
        yield running


async def post(http: httpx.AsyncClient, control: dict[str, str], **body: Any) -> httpx.Response:
    return await http.post("/v1/tasks", json=task_body(**body), headers=control)


def refused(response: httpx.Response, *, org: str = "org_a", current: int = LIMIT) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["retryable"] is False
    assert error["details"] == {
        "quota": "live_tasks",
        "org_id": org,
        "limit": LIMIT,
        "current": current,
        "adding": 1,
    }
    assert f"{current} live tasks" in error["message"]
    assert f"limit of {LIMIT}" in error["message"]


async def status(live: Live, task: dict[str, Any]) -> str:
    """The task's state as its own agent token reads it (a refusal must not touch it)."""
    answer = await live.http.get(
        f"/v1/tasks/{task['task_id']}",
        headers={"authorization": f"Bearer {task['tokens']['agent']}"},
    )
    assert answer.status_code == 200, answer.text
    state: str = answer.json()["status"]
    return state


async def test_an_organization_at_its_limit_is_refused_and_keeps_its_tasks(live: Live) -> None:
    held = [await live.create_task() for _ in range(LIMIT)]
    refused(await post(live.http, live.control))
    refused(await post(live.http, live.control, actor="someone_else", role="member"))
    assert [await status(live, task) for task in held] == ["active"] * LIMIT

    # Another organization is not affected, and its tasks do not count against org_a.
    others = [await live.create_task(org="org_b") for _ in range(LIMIT)]
    refused(await post(live.http, live.control, org="org_b"), org="org_b")
    refused(await post(live.http, live.control))
    assert len({t["task_id"] for t in held + others}) == 2 * LIMIT


async def test_ending_a_task_frees_exactly_one_slot(live: Live) -> None:
    held = [await live.create_task() for _ in range(LIMIT)]
    await live.end_task(held[0]["task_id"])
    await live.end_task(held[0]["task_id"])  # ending it again frees nothing more
    assert (await post(live.http, live.control)).status_code == 201
    refused(await post(live.http, live.control))


async def test_concurrent_creates_admit_exactly_the_free_slots(live: Live) -> None:
    answers = await asyncio.gather(*(post(live.http, live.control) for _ in range(20)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] * LIMIT + [429] * 15
    for answer in answers:
        if answer.status_code == 429:
            refused(answer)

    admitted = [a.json()["task_id"] for a in answers if a.status_code == 201]
    await live.end_task(admitted[0])
    again = await asyncio.gather(*(post(live.http, live.control) for _ in range(10)))
    assert sorted(a.status_code for a in again) == [201] + [429] * 9


async def test_an_expired_task_no_longer_holds_a_slot(live: Live) -> None:
    # A task's life starts at its creation's whole second, so a TTL of n seconds lives
    # between n-1 and n: three leave two for the five creates and the refused one.
    held = [await live.create_task(ttl_s=3) for _ in range(LIMIT)]
    refused(await post(live.http, live.control))
    last = max(datetime.fromisoformat(task["expires_at"]) for task in held)
    await asyncio.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()) + 0.1)
    assert (await post(live.http, live.control)).status_code == 201


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway over HTTP that, unlike `live`, leaves its tasks live when it stops, as a
    gateway being restarted does."""
    app = build_app(gateway=Gateway(settings), extensions=EXTENSIONS)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield http


async def test_a_restarted_gateway_counts_the_tasks_created_before(
    settings: Settings, live_factory: LiveFactory
) -> None:
    control = {"authorization": f"Bearer {settings.control_key}"}
    async with served(settings) as http:
        first = [await post(http, control) for _ in range(LIMIT - 1)]
        assert [a.status_code for a in first] == [201] * (LIMIT - 1)
        ended = await http.delete(f"/v1/tasks/{first[0].json()['task_id']}", headers=control)
        assert ended.status_code == 200
        assert (await post(http, control)).status_code == 201

    async with live_factory(settings, extensions=EXTENSIONS) as live:
        assert (await post(live.http, live.control)).status_code == 201
        refused(await post(live.http, live.control))
        await live.end_task(first[1].json()["task_id"])
        assert (await post(live.http, live.control)).status_code == 201
        refused(await post(live.http, live.control))
