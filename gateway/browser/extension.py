"""`install(gw)`: wire the task browser into a gateway (service, tools, task hooks)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from gateway.core.identity import TaskIdentity
from gateway.core.storage_state import StorageStates
from gateway.core.store.artifacts import ArtifactRef
from gateway.parts import browser_pool_config, browser_processes_config, browser_tools_config
from gateway.runtime import Gateway

from . import tools
from .app_link import AppLink
from .pool import BrowserPool
from .processes import BrowserProcesses
from .session import EvidenceSink


def install(gw: Gateway) -> list[BaseRoute]:
    # A BrowserProcesses already provided (tests, several gateways in one process) is
    # shared and left running; otherwise this gateway launches and stops its own.
    processes = gw.services.find(BrowserProcesses)
    owns = processes is None
    if processes is None:
        processes = BrowserProcesses(browser_processes_config(gw.settings))

    async def put_artifact(
        identity: TaskIdentity, data: bytes, name: str, media_type: str
    ) -> ArtifactRef:
        return await gw.store.put_artifact(identity, data, name=name, media_type=media_type)

    # Signed-in tasks' storage states, in memory, for the task's life only.
    states = StorageStates()
    gw.tasks.storage_states = states
    gw.tasks.on_end(states.drop)
    pool = BrowserPool(
        browser_pool_config(gw.settings),
        processes,
        EvidenceSink(
            record=gw.events.record,
            repeated=gw.events.repeated,
            log=gw.task_log.publish,
            put_artifact=put_artifact,
            get_artifact=gw.store.get_artifact,
            read_artifact=gw.store.read_artifact,
        ),
        owns_processes=owns,
        metrics=gw.metrics.registry,
        shed=gw.metrics.calls_shed.labels(resource="browser"),
        app_link=lambda: gw.services.find(AppLink),  # type: ignore[type-abstract]
        storage_state=states.get,
        placement=gw.placement,
    )
    gw.services.provide(BrowserPool, pool)
    tools.register(gw.registry, browser_tools_config(gw.settings))
    gw.tasks.on_end(pool.end_task)
    if gw.placement is not None:
        # The task's context lives on its owner; a node that lost the task closes its own.
        gw.placement.on_release(lambda task_id: pool.end_task(task_id, "moved"))
    gw.task_probes["browser"] = pool.probe
    gw.add_part("task browser pool", start=pool.start, stop=pool.close)
    return []
