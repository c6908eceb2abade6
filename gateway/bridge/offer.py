"""The bridge envelope a task is given, and the allowlist behind it.

`POST /v1/tasks` answers with `parent_tool_bridge`: the exact tool names this task may call
through the bridge (its `allowed_tools` patterns and scopes resolved against the
registry), a `host_endpoint` dispatcher that names the two variables where the sandbox
finds the endpoint URL and the bridge token, and metadata-only sandbox variables.

The envelope never holds the token. The control plane takes `tokens.bridge` from the same
answer and injects it into the sandbox as `WP_CODEBOX_PARENT_TOOL_TOKEN`;
`sandbox_env_values` lists every value to inject, token included, for that purpose.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from gateway.bridge.envelopes import (
    DEFAULT_TIMEOUT_MS,
    Command,
    Dispatcher,
    Endpoint,
    ParentToolBridge,
)
from gateway.bridge.schemas import (
    BRIDGE_REF_ENV,
    BRIDGE_SCHEMA,
    BRIDGE_SCHEMA_ENV,
    DISPATCH_MODE_ENV,
    ENDPOINT_ENV,
    PARENT_TOOLS_PATH,
    REQUEST_SCHEMA,
    REQUEST_SCHEMA_ENV,
    RESULT_SCHEMA,
    RESULT_SCHEMA_ENV,
    TOKEN_ENV,
)
from gateway.core.identity import TaskIdentity
from gateway.core.registry import Registry

# Room for the transport and the transcript on top of the slowest tool's own deadline.
TIMEOUT_MARGIN_MS = 5_000


def allowed_tools(identity: TaskIdentity, registry: Registry) -> list[str]:
    """The exact names this task may call: its scopes, role and allowlist, resolved, and
    the tools a person may approve for it (the call then waits for that person)."""
    return sorted(tool.name for tool in registry if tool.reachable(identity))


def bridge_timeout_ms(identity: TaskIdentity, registry: Registry) -> int:
    slowest = max(
        (int(t.timeout_s * 1000) for t in registry if t.reachable(identity)),
        default=0,
    )
    return max(DEFAULT_TIMEOUT_MS, slowest + TIMEOUT_MARGIN_MS)


def bridge_ref(identity: TaskIdentity) -> str:
    return f"ptb_{identity.task_id}"


def bridge_envelope(identity: TaskIdentity, registry: Registry, base_url: str) -> ParentToolBridge:
    endpoint_url = f"{base_url.rstrip('/')}{PARENT_TOOLS_PATH}"
    return ParentToolBridge(
        allowed_tools=allowed_tools(identity, registry),
        dispatcher=Dispatcher(
            owner="wp-codebox",
            mode="host_endpoint",
            endpoint=Endpoint(url_env=ENDPOINT_ENV, method="POST", token_env=TOKEN_ENV),
            request_schema=REQUEST_SCHEMA,
            result_schema=RESULT_SCHEMA,
            timeout_ms=bridge_timeout_ms(identity, registry),
        ),
        metadata={
            "bridge_ref": bridge_ref(identity),
            "task_id": identity.task_id,
            "sandbox_id": identity.sandbox.id,
            # Where the control plane points ENDPOINT_ENV; the value is not a secret.
            "endpoint_url": endpoint_url,
            # Which field of the task answer goes into TOKEN_ENV (the value never does).
            "token_source": "tokens.bridge",
        },
    )


def sandbox_env_values(envelope: ParentToolBridge, bridge_token: str) -> dict[str, str]:
    """The environment a control plane injects into the sandbox for this envelope.

    The metadata-only variables, plus the endpoint URL and the bridge token under the
    names the dispatcher declares. This is the one place the token is paired with the
    envelope, and its result belongs in the sandbox's environment, never in an envelope.
    """
    mode = envelope.dispatcher.mode
    values = {
        BRIDGE_REF_ENV: str(envelope.metadata.get("bridge_ref", "")),
        BRIDGE_SCHEMA_ENV: BRIDGE_SCHEMA,
        DISPATCH_MODE_ENV: mode,
        REQUEST_SCHEMA_ENV: envelope.dispatcher.request_schema,
        RESULT_SCHEMA_ENV: envelope.dispatcher.result_schema,
    }
    endpoint = envelope.dispatcher.endpoint
    url = envelope.metadata.get("endpoint_url")
    if isinstance(url, str):
        values[endpoint.url_env if endpoint else ENDPOINT_ENV] = url
    values[endpoint.token_env if endpoint else TOKEN_ENV] = bridge_token
    return values


def relay_argv() -> list[str]:
    """The shipped `host_command` program: relays stdin's request to a gateway over HTTP."""
    # The relay module itself rather than the `gateway` command: it starts without
    # loading anything of the host side. `gateway bridge relay` is the same program.
    return [sys.executable, "-m", "gateway.bridge.relay"]


def as_host_command(
    envelope: ParentToolBridge, argv: Sequence[str] | None = None
) -> ParentToolBridge:
    """The same bridge with `host_command` dispatch (by default through the relay)."""
    dispatcher = envelope.dispatcher.model_copy(
        update={
            "mode": "host_command",
            "endpoint": None,
            "command": Command(argv=list(argv or relay_argv())),
        }
    )
    return envelope.model_copy(update={"dispatcher": dispatcher})


def task_extra(registry: Registry, base_url: str) -> Any:
    """The `gw.task_extras` hook: the wire form of the task's bridge envelope."""

    def extra(identity: TaskIdentity, _tokens: dict[str, str]) -> dict[str, Any]:
        # `_tokens` is deliberately unused: the envelope must not carry the bridge token.
        return bridge_envelope(identity, registry, base_url).wire()

    return extra
