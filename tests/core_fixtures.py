"""Helpers shared by the core tests: an identity builder and a started gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.identity import Actor, Budget, Sandbox, TaskIdentity
from gateway.core.tasks.service import TaskCreate
from gateway.runtime import Gateway
from gateway.settings import Settings


def identity(
    *,
    task_id: str = "task_1",
    org: str = "org_a",
    role: str = "admin",
    scopes: Sequence[str] = ("ui",),
    allowed_tools: Sequence[str] | None = None,
    budget: Budget | None = None,
) -> TaskIdentity:
    now = datetime.now(UTC)
    return TaskIdentity(
        task_id=task_id,
        actor=Actor(id="user_1", role=role),
        org_id=org,
        sandbox=Sandbox(id="sb", app_origin="http://127.0.0.1:9"),
        scopes=frozenset(scopes),
        allowed_tools=tuple(allowed_tools) if allowed_tools is not None else None,
        budget=budget or Budget(),
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )


async def started(settings: Settings) -> AsyncIterator[Gateway]:
    gw = Gateway(settings)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def new_task(
    gw: Gateway,
    *,
    org: str = "org_a",
    role: str = "admin",
    scopes: Sequence[str] = ("ui",),
    allowed_tools: Sequence[str] | None = None,
    budget: Budget | None = None,
    approvals: ApprovalPolicy | None = None,
) -> tuple[TaskIdentity, dict[str, str]]:
    return await gw.tasks.create(
        TaskCreate(
            actor=Actor(id=f"user_{org}", role=role),
            org_id=org,
            sandbox=Sandbox(id=f"sb_{org}", app_origin="http://127.0.0.1:9"),
            scopes=list(scopes),
            allowed_tools=list(allowed_tools) if allowed_tools is not None else None,
            budget=budget or Budget(),
            approvals=approvals or ApprovalPolicy(),
        )
    )
