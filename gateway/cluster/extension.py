"""The cluster as a gateway extension: when `GATEWAY_NODE_ID` and `GATEWAY_NATS_URL` are set,
this process joins the cluster as a node; otherwise nothing here runs.

Installed before the other extensions, so that they find `gw.placement` set and register
what they let go of when a task moves to another node, and the doors they install run
their calls through `gw.calls`, the routing to each task's owner (`routing.py`).
"""

from __future__ import annotations

import logging

from starlette.routing import BaseRoute

from gateway.runtime import Gateway

from .bus import Bus
from .ledger import Ledger
from .nats_bus import NatsBus
from .node import ClusterNode
from .routing import Routing
from .subjects import INBOX

log = logging.getLogger(__name__)


def install(gw: Gateway) -> list[BaseRoute]:
    settings = gw.settings
    node_id, nats_url = settings.node_id, settings.nats_url
    if node_id is None or nats_url is None:
        return []

    user = settings.nats_user or node_id
    password = settings.nats_password

    async def connect() -> Bus:
        if password is None:
            log.warning(
                "cluster bus: no GATEWAY_NATS_PASSWORD: connecting to NATS with no "
                "credentials; a NATS server that lets this in lets any local process in"
            )
        return await NatsBus.connect(
            nats_url,
            name=f"gateway {node_id}",
            user=user if password is not None else None,
            password=password,
            inbox_prefix=INBOX.format(node=node_id),
        )

    node = ClusterNode(
        node_id,
        Ledger(settings.resolved_database_url(), node_id),
        connect,
        gw.tasks,
        gw.pipeline,
        # Read when the part starts: the keys may be generated or loaded at start.
        lambda: settings.secret_keys,
        beat_s=settings.cluster_beat_s,
    )
    gw.services.provide(ClusterNode, node)
    # A person's answer reaches the node that asks; a node that lost the task closes its
    # questions, and the call that asked ends.
    node.on_release(lambda task_id: gw.approvals.task_ended(task_id, "moved"))
    # The one place the cluster is fitted into a gateway built before it: the pipeline's
    # side effects are fenced to this node's tasks, and the doors' calls are routed to
    # their tasks' owners (the pipeline itself never asks whether it is in a cluster).
    gw.placement = node
    gw.pipeline.fencing = node.fencing
    gw.calls = Routing(gw.pipeline, node)
    gw.add_part("cluster node", context=node.running)
    gw.task_probes["node"] = lambda task_id: node.describe(task_id)
    return []
