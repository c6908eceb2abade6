"""`install(gw)`: sandboxes per task in a gateway (the provisioner, the browser's link,
the task probe, the task-end hook, and the part that tears everything down at stop)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.routing import BaseRoute

from gateway.browser.app_link import AppLink
from gateway.core.identity import TaskIdentity
from gateway.core.store.artifacts import ArtifactRef
from gateway.parts import incus_config, local_config
from gateway.runtime import Gateway

from .incus import IncusProvider
from .local import LocalProvider
from .provider import ProviderRegistry
from .service import Sandboxes, SandboxSink

EVIDENCE_SCAN = 200  # records read back for a gone sandbox's manifest (it is among the first)


def install(gw: Gateway) -> list[BaseRoute]:
    settings = gw.settings
    providers = ProviderRegistry()
    incus = incus_config(settings)
    if incus is not None:
        providers.add(IncusProvider(incus))
    if settings.clustered:
        # A local sandbox lives beside the node that started it, and a task of a cluster
        # moves between nodes: a node of a cluster provisions only on a backend every
        # node reaches (Incus).
        if not providers.all():
            return []
    else:
        providers.add(LocalProvider(local_config(settings)))

    async def put_artifact(
        identity: TaskIdentity, data: bytes, name: str, media_type: str
    ) -> ArtifactRef:
        return await gw.store.put_artifact(identity, data, name=name, media_type=media_type)

    async def identity(task_id: str) -> TaskIdentity | None:
        record = await gw.tasks.record(task_id)
        return record.identity if record is not None else None

    async def evidence_of_kind(identity: TaskIdentity, kind: str) -> list[dict[str, Any]]:
        records = await gw.store.evidence_for(
            identity.org_id, identity.task_id, limit=EVIDENCE_SCAN
        )
        return [r for r in records if r.get("kind") == kind]

    async def alive(task_id: str) -> bool:
        record = await gw.tasks.record(task_id)
        return (
            record is not None
            and record.revoked_at is None
            and record.identity.expires_at > datetime.now(UTC)
        )

    sandboxes = Sandboxes(
        providers,
        SandboxSink(
            record=gw.events.record,
            put_artifact=put_artifact,
            identity=identity,
            evidence_of_kind=evidence_of_kind,
            alive=alive,
        ),
        max_live_per_org=settings.sandbox_max_live_per_org,
    )
    gw.services.provide(Sandboxes, sandboxes)
    gw.services.provide(AppLink, sandboxes)  # type: ignore[type-abstract]
    gw.tasks.provisioner = sandboxes
    gw.tasks.on_end(sandboxes.task_ended)
    if gw.placement is not None:
        gw.placement.on_release(sandboxes.released)
    gw.task_probes["sandbox"] = sandboxes.probe
    gw.add_part("sandboxes", start=sandboxes.start, stop=sandboxes.close)
    return []
