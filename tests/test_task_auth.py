"""Token verification against the stored task: revoked, expired, unknown, other owners."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.core.errors import AuthError, TokenExpired, TokenRevoked
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.conftest import LiveFactory
from tests.core_fixtures import new_task, started


@pytest.fixture
def settings(store_settings: Settings) -> Settings:
    """Every test of this module runs on SQLite and on PostgreSQL."""
    return store_settings


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    async for gateway in started(settings):
        yield gateway


async def test_verification_returns_the_stored_identity(gw: Gateway) -> None:
    identity, tokens = await new_task(gw, role="member", scopes=["ui", "browser"])
    for purpose in Purpose:
        got = await gw.tasks.authenticate(tokens[purpose.value], purpose)
        assert got == identity


async def test_ending_a_task_revokes_every_token(gw: Gateway) -> None:
    identity, tokens = await new_task(gw)
    assert await gw.tasks.end(identity.task_id) is True
    for purpose in Purpose:
        with pytest.raises(TokenRevoked) as caught:
            await gw.tasks.authenticate(tokens[purpose.value], purpose)
        assert caught.value.code == "revoked"
    assert await gw.tasks.end(identity.task_id) is False  # idempotent


async def test_a_token_naming_an_unknown_task_fails(gw: Gateway) -> None:
    token, _ = gw.tokens.mint("task_that_never_was", Purpose.AGENT, 60)
    with pytest.raises(AuthError):
        await gw.tasks.authenticate(token, Purpose.AGENT)


async def test_an_expired_task_fails_even_with_a_fresh_token(gw: Gateway) -> None:
    identity, _ = await new_task(gw)
    token, _ = gw.tokens.mint(identity.task_id, Purpose.AGENT, 60)
    gw.tasks._clock = lambda: identity.expires_at.timestamp() + 1
    with pytest.raises(TokenExpired):
        await gw.tasks.authenticate(token, Purpose.AGENT)


async def test_revocation_survives_a_restart(settings: Settings) -> None:
    async for gw in started(settings):
        ended, ended_tokens = await new_task(gw)
        kept, kept_tokens = await new_task(gw, org="org_b")
        await gw.tasks.end(ended.task_id)
    async for gw in started(settings):
        with pytest.raises(TokenRevoked):
            await gw.tasks.authenticate(ended_tokens["agent"], Purpose.AGENT)
        assert await gw.tasks.authenticate(kept_tokens["agent"], Purpose.AGENT) == kept
        assert gw.tasks.active_count() == 1


async def test_restart_over_http_keeps_ended_tasks_ended(
    settings: Settings, live_factory: LiveFactory
) -> None:
    async with live_factory(settings) as live:
        task = await live.create_task()
        await live.end_task(task["task_id"])
    async with live_factory(settings) as live:
        response = await live.http.get(
            f"/v1/tasks/{task['task_id']}",
            headers={"authorization": f"Bearer {task['tokens']['agent']}"},
        )
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "revoked"
        status = await live.http.get(f"/v1/tasks/{task['task_id']}", headers=live.control)
        assert status.json()["status"] == "ended"


async def test_expiry_is_announced_once_to_listeners(gw: Gateway) -> None:
    identity, _ = await new_task(gw)
    other, _ = await new_task(gw)
    heard: list[tuple[str, str]] = []

    async def listener(task_id: str, reason: str) -> None:
        heard.append((task_id, reason))

    gw.tasks.on_end(listener)
    now = identity.expires_at.timestamp() + 1
    gw.tasks._clock = lambda: now
    assert sorted(await gw.tasks.sweep()) == sorted([identity.task_id, other.task_id])
    assert await gw.tasks.sweep() == []
    assert sorted(heard) == sorted([(identity.task_id, "expired"), (other.task_id, "expired")])
    record = await gw.tasks.get(identity.task_id)
    assert gw.tasks.status_of(record) == "expired"
