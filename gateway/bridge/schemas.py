"""The stable ids of the parent tool bridge contract: schema ids and environment names.

These strings are the contract; other runtimes match on them byte for byte, so they live
in one place and are never spelled out anywhere else.
"""

from __future__ import annotations

from typing import Final

BRIDGE_SCHEMA: Final = "wp-codebox/parent-tool-bridge/v1"
REQUEST_SCHEMA: Final = "wp-codebox/parent-tool-request/v1"
RESULT_SCHEMA: Final = "wp-codebox/parent-tool-result/v1"
DELEGATION_REQUEST_SCHEMA: Final = "wp-codebox/host-delegation-request/v1"
DELEGATION_RESULT_SCHEMA: Final = "wp-codebox/host-delegation-result/v1"
DELEGATION_EVENT_SCHEMA: Final = "wp-codebox/host-delegation-event/v1"
VERSION: Final = 1

# Where the sandbox finds the dispatcher's address and credential. The envelope names
# these variables; their values are injected into the sandbox by the control plane.
ENDPOINT_ENV: Final = "WP_CODEBOX_PARENT_TOOL_ENDPOINT"
TOKEN_ENV: Final = "WP_CODEBOX_PARENT_TOOL_TOKEN"  # noqa: S105 (a variable name)

# Metadata-only sandbox variables (contract ids and dispatch mode; never a secret).
BRIDGE_REF_ENV: Final = "WP_CODEBOX_PARENT_TOOL_BRIDGE_REF"
BRIDGE_SCHEMA_ENV: Final = "WP_CODEBOX_PARENT_TOOL_BRIDGE_SCHEMA"
DISPATCH_MODE_ENV: Final = "WP_CODEBOX_PARENT_TOOL_DISPATCH_MODE"
REQUEST_SCHEMA_ENV: Final = "WP_CODEBOX_PARENT_TOOL_REQUEST_SCHEMA"
RESULT_SCHEMA_ENV: Final = "WP_CODEBOX_PARENT_TOOL_RESULT_SCHEMA"

SANDBOX_VARIABLES: Final = {
    "bridge_ref": BRIDGE_REF_ENV,
    "bridge_schema": BRIDGE_SCHEMA_ENV,
    "dispatch_mode": DISPATCH_MODE_ENV,
    "request_schema": REQUEST_SCHEMA_ENV,
    "result_schema": RESULT_SCHEMA_ENV,
}

TRANSCRIPT_KIND: Final = "tool-call-transcript"
PARENT_TOOLS_PATH: Final = "/v1/parent-tools"
DELEGATIONS_PATH: Final = "/v1/delegations"
