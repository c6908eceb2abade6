"""The workspace tools through the registry pipeline: scopes, isolation, idempotency."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gateway import workspace
from gateway.core.identity import Actor, Sandbox, TaskIdentity
from gateway.core.results import Door
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.workspace import workspace_dir
from tests.core_fixtures import new_task, started

RW = ("workspace:read", "workspace:write")


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    async for running in started(settings):
        workspace.install(running)
        yield running


async def test_each_task_has_its_own_workspace(gw: Gateway) -> None:
    a, _ = await new_task(gw, org="org_a", scopes=RW)
    b, _ = await new_task(gw, org="org_a", scopes=RW)
    other_org, _ = await new_task(gw, org="org_b", scopes=RW)
    wrote = await gw.pipeline.call(
        a, "workspace.write", {"path": "plan.md", "contents": "A's plan"}, door=Door.BRIDGE
    )
    assert wrote.ok
    for intruder in (b, other_org):
        seen = await gw.pipeline.call(
            intruder, "workspace.read", {"path": "plan.md"}, door=Door.BRIDGE
        )
        assert (seen.status, seen.error and seen.error.code) == ("failed", "not_found")
        found = await gw.pipeline.call(
            intruder, "workspace.search", {"query": "plan"}, door=Door.BRIDGE
        )
        assert found.output["matches"] == []


async def test_a_dot_dot_organization_is_not_a_name(gw: Gateway) -> None:
    # `..` as an organization would have put its files one folder up: it is refused when
    # the task is created, and the workspace's `o_` prefix is the second line.
    for org in ("..", "."):
        with pytest.raises(ValidationError, match="org_id"):
            await new_task(gw, org=org, scopes=RW)


def test_the_workspace_prefix_keeps_a_dotted_organization_inside(settings: Settings) -> None:
    now = datetime.now(UTC)
    identity = TaskIdentity.model_construct(
        task_id="task_1",
        org_id="..",
        actor=Actor(id="u", role="admin"),
        sandbox=Sandbox(id="sb", app_origin="http://127.0.0.1:9"),
        scopes=frozenset(RW),
        created_at=now,
        expires_at=now,
    )
    root = workspace_dir(settings.data_dir, identity)
    assert root.resolve().is_relative_to((settings.data_dir / "workspaces").resolve())


async def test_reading_does_not_grant_writing(gw: Gateway) -> None:
    reader, _ = await new_task(gw, scopes=("workspace:read",))
    result = await gw.pipeline.call(
        reader, "workspace.write", {"path": "x", "contents": "x"}, door=Door.BRIDGE
    )
    assert (result.status, result.error and result.error.code) == ("denied", "forbidden")
    catalog = {entry["tool_id"] for entry in gw.registry.catalog(reader)}
    assert catalog == {"workspace.read", "workspace.search"}


async def test_a_replayed_edit_returns_the_recorded_result_and_edits_once(gw: Gateway) -> None:
    task, _ = await new_task(gw, scopes=RW)
    await gw.pipeline.call(
        task, "workspace.write", {"path": "v.txt", "contents": "v1"}, door=Door.BRIDGE
    )
    edit = {"path": "v.txt", "old": "v1", "new": "v2"}
    first = await gw.pipeline.call(
        task, "workspace.edit", edit, door=Door.BRIDGE, idempotency_key="ptr_edit"
    )
    again = await gw.pipeline.call(
        task, "workspace.edit", edit, door=Door.BRIDGE, idempotency_key="ptr_edit"
    )
    assert first.ok and again.ok and again.replayed
    assert again.output == first.output
    # Run a second time for real, the edit would have found no "v1" and failed.
    fresh = await gw.pipeline.call(
        task, "workspace.edit", edit, door=Door.BRIDGE, idempotency_key="ptr_other"
    )
    assert (fresh.status, fresh.error and fresh.error.code) == ("failed", "conflict")


@pytest.mark.parametrize(
    ("tool", "tool_input", "status", "code"),
    [
        ("workspace.read", {"path": "/etc/passwd"}, "denied", "forbidden"),
        ("workspace.read", {"path": "../../../secret.key"}, "denied", "forbidden"),
        ("workspace.write", {"path": "a\u0000b", "contents": "x"}, "denied", "forbidden"),
        ("workspace.write", {"path": "big", "contents": "x" * 200_000}, "failed", "invalid_input"),
        ("workspace.read", {"path": "x" * 2000}, "failed", "invalid_input"),
        ("workspace.search", {"query": ""}, "failed", "invalid_input"),
        ("workspace.edit", {"path": "x", "old": "", "new": "y"}, "failed", "invalid_input"),
        ("workspace.read", {"path": "x", "extra": 1}, "failed", "invalid_input"),
    ],
)
async def test_hostile_inputs_end_in_a_structured_result(
    gw: Gateway, tool: str, tool_input: dict[str, object], status: str, code: str
) -> None:
    task, _ = await new_task(gw, scopes=RW)
    result = await gw.pipeline.call(task, tool, tool_input, door=Door.BRIDGE)
    assert (result.status, result.error and result.error.code) == (status, code)
