"""Joining the cluster: when `GATEWAY_NODE_ID` and `GATEWAY_NATS_URL` are set, the gateway is
built as one node of it; otherwise nothing here runs.

`joining(settings)` is resolved before the gateway is built and handed to it (the
`runtime.Cluster` port): the gateway's pipeline is built fenced to this node's tasks
(`fencing.py`), then the node is built of that pipeline and the task service, so the parts
installed after find `gw.placement` (the node) and `gw.calls` (the routing of each call to
its task's owner, `routing.py`) already there.
"""

from __future__ import annotations

import logging

from gateway.core.pipeline import Pipeline
from gateway.core.tasks.service import TaskService
from gateway.settings import Settings

from .bus import Bus
from .fencing import NodeFencing
from .ledger import Ledger
from .nats_bus import NatsBus
from .node import ClusterNode
from .owners import Owners
from .subjects import INBOX

log = logging.getLogger(__name__)


class Joining:
    """One node's seat in the cluster: its ledger, owner tables and fencing, made before
    the pipeline, and the node made after it."""

    def __init__(self, settings: Settings, node_id: str, nats_url: str) -> None:
        self.settings = settings
        self.node_id = node_id
        self.nats_url = nats_url
        self._user = settings.nats_user or node_id
        self._password = settings.nats_password
        self.fencing = NodeFencing(
            node_id, Ledger(settings.resolved_database_url(), node_id), Owners(node_id)
        )

    def node(self, tasks: TaskService, pipeline: Pipeline) -> ClusterNode:
        """The node, of the pipeline built with `fencing` (once per gateway)."""
        settings = self.settings
        return ClusterNode(
            self.fencing,
            self._connect,
            tasks,
            pipeline,
            # Read when the part starts: the keys may be generated or loaded at start.
            lambda: settings.secret_keys,
            beat_s=settings.cluster_beat_s,
        )

    async def _connect(self) -> Bus:
        password = self._password
        if password is None:
            log.warning(
                "cluster bus: no GATEWAY_NATS_PASSWORD: connecting to NATS with no "
                "credentials; a NATS server that lets this in lets any local process in"
            )
        return await NatsBus.connect(
            self.nats_url,
            name=f"gateway {self.node_id}",
            user=self._user if password is not None else None,
            password=password,
            inbox_prefix=INBOX.format(node=self.node_id),
        )


def joining(settings: Settings) -> Joining | None:
    """The cluster `settings` name this gateway a node of, or None (a single gateway)."""
    node_id, nats_url = settings.node_id, settings.nats_url
    if node_id is None or nats_url is None:
        return None
    return Joining(settings, node_id, nats_url)
