"""The `sandbox-manifest/v1` record: what ran for a task, from what, bound to whom.

Written as the task's evidence (kind `sandbox-manifest/v1`) once the task is stored, and
shown under `sandbox.manifest` in `GET /v1/tasks/{id}`. It names the environment's
variables, never their values. `enforced` is what the kernel was found holding the running
sandbox to (`enforcement.py`, read back, never assumed from what was asked), and
`not_enforced` says in words what nothing on this host holds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Protocol

from gateway.core.sandbox_spec import Limits, Provision

from .checkout import Checkout
from .provider import Binding

KIND = "sandbox-manifest/v1"


class Provisioned(Protocol):
    """What a provider's handle knows of its sandbox that the manifest names."""

    provider: str
    sandbox_id: str
    spec: Provision
    limits: Limits
    origin: str
    binding: Binding


def of(
    handle: Provisioned,
    checkout: Checkout,
    *,
    command: list[str],
    enforcement: list[str],
    user: int | None,
    enforced: dict[str, Any],
    not_enforced: list[str],
) -> dict[str, Any]:
    """The manifest of a sandbox that has just become healthy, from its handle and the
    checkout it runs."""
    return build(
        provider=handle.provider,
        sandbox_id=handle.sandbox_id,
        spec=handle.spec,
        commit=checkout.commit,
        tree=checkout.public(),
        command=command,
        limits=handle.limits,
        enforcement=enforcement,
        origin=handle.origin,
        binding=handle.binding,
        started_at=time.time(),
        user=user,
        enforced=enforced,
        not_enforced=not_enforced,
    )


def build(
    *,
    provider: str,
    sandbox_id: str,
    spec: Provision,
    commit: str,
    tree: dict[str, Any],
    command: list[str],
    limits: Limits,
    enforcement: list[str],
    origin: str,
    binding: Binding,
    started_at: float,
    user: int | None,
    enforced: dict[str, Any] | None = None,
    not_enforced: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "kind": KIND,
        "provider": provider,
        "sandbox_id": sandbox_id,
        "repository": spec.repository,
        "commit": commit,
        # `tree`: git's tree id; `sha256`: over the files written (gateway/sandbox/checkout.py)
        "tree": tree,
        "command": command,
        "env": sorted(spec.env),
        "limits": limits.model_dump(),
        "enforced_by": enforcement,
        "enforced": enforced or {},
        "not_enforced": not_enforced or [],
        "started_at": datetime.fromtimestamp(started_at, UTC).isoformat(),
        "origin": origin,
        "user": user,
        "keep_data": spec.keep_data,
        "bound_to": {
            "task_id": binding.task_id,
            "org_id": binding.org_id,
            "owner": binding.actor_id,
            "expires_at": binding.expires_at.isoformat(),
        },
    }
