"""The parent tool bridge (`wp-codebox/parent-tool-bridge/v1`) and host delegation.

Host side: `install(gw)` adds the task's bridge envelope to `POST /v1/tasks`, the host
dispatcher at `POST /v1/parent-tools` and host delegation at `POST /v1/delegations`.
Sandbox side: `BridgeClient.from_envelope(envelope, env=os.environ).call(tool, input)`, and
the `gateway bridge call` / `gateway bridge relay` commands.

Names are imported on first use: the sandbox side (client, relay) must start fast and not
load the host side's database and pipeline.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.bridge.adapters import (
        DelegationContext,
        DelegationHosts,
        HostAdapter,
        LocalRegistryAdapter,
    )
    from gateway.bridge.client import BridgeClient, load_bridge
    from gateway.bridge.delegation_envelopes import (
        HostDelegationEvent,
        HostDelegationRequest,
        HostDelegationResult,
    )
    from gateway.bridge.envelopes import ParentToolBridge, ParentToolRequest, ParentToolResult
    from gateway.bridge.extension import install
    from gateway.bridge.offer import as_host_command, bridge_envelope, sandbox_env_values
    from gateway.bridge.validation import EnvelopeInvalid

_WHERE = {
    "DelegationContext": "adapters",
    "DelegationHosts": "adapters",
    "HostAdapter": "adapters",
    "LocalRegistryAdapter": "adapters",
    "BridgeClient": "client",
    "load_bridge": "client",
    "HostDelegationEvent": "delegation_envelopes",
    "HostDelegationRequest": "delegation_envelopes",
    "HostDelegationResult": "delegation_envelopes",
    "ParentToolBridge": "envelopes",
    "ParentToolRequest": "envelopes",
    "ParentToolResult": "envelopes",
    "install": "extension",
    "as_host_command": "offer",
    "bridge_envelope": "offer",
    "sandbox_env_values": "offer",
    "EnvelopeInvalid": "validation",
}

__all__ = [
    "BridgeClient",
    "DelegationContext",
    "DelegationHosts",
    "EnvelopeInvalid",
    "HostAdapter",
    "HostDelegationEvent",
    "HostDelegationRequest",
    "HostDelegationResult",
    "LocalRegistryAdapter",
    "ParentToolBridge",
    "ParentToolRequest",
    "ParentToolResult",
    "as_host_command",
    "bridge_envelope",
    "install",
    "load_bridge",
    "sandbox_env_values",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gateway.bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gateway.bridge.{module}"), name)
