"""`gateway bridge call` and `gateway bridge relay`: the bridge on the command line.

    gateway bridge call --parent-tool-bridge '<json>' TOOL [--input '<json>']

prints the result envelope as JSON and exits 0 only when the call succeeded (1 for any
other status). A bridge argument that is not a valid envelope means the dispatcher is not
configured: `unavailable`. `--parent-tool-bridge @file` reads the envelope from a file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gateway.bridge import relay
from gateway.bridge.client import BridgeClient, new_request_id
from gateway.bridge.envelopes import DEFAULT_TIMEOUT_MS, ParentToolResult, failure
from gateway.bridge.schemas import ENDPOINT_ENV, TOKEN_ENV
from gateway.bridge.validation import EnvelopeInvalid


def _emit(result: ParentToolResult) -> int:
    print(json.dumps(result.wire(), ensure_ascii=False))
    return 0 if result.ok else 1


def _text_arg(value: str) -> str:
    if value.startswith("@"):
        return Path(value[1:]).read_text()
    return value


def _call(args: argparse.Namespace) -> int:
    request_id = args.request_id or new_request_id()
    try:
        client = BridgeClient.from_envelope(_text_arg(args.parent_tool_bridge), os.environ)
    except (EnvelopeInvalid, OSError) as exc:
        message = exc.message if isinstance(exc, EnvelopeInvalid) else "cannot read the envelope"
        return _emit(
            failure(
                "unavailable",
                "unavailable",
                f"--parent-tool-bridge is not a usable bridge envelope: {message}",
                request_id=request_id,
                tool=args.tool,
            )
        )
    tool_input: Any = {}
    if args.input is not None:
        try:
            tool_input = json.loads(_text_arg(args.input))
        except (ValueError, OSError, RecursionError):
            return _emit(
                failure(
                    "failed",
                    "invalid_input",
                    "--input is not JSON",
                    request_id=request_id,
                    tool=args.tool,
                )
            )
    result = client.call_sync(
        args.tool, tool_input, request_id=request_id, capability=args.capability
    )
    return _emit(result)


def _relay(args: argparse.Namespace) -> int:
    return relay.run(
        os.environ, url_env=args.url_env, token_env=args.token_env, timeout_ms=args.timeout_ms
    )


def add_commands(sub: Any) -> None:
    """Register `bridge call` and `bridge relay` on the `gateway` command's subparsers."""
    bridge = sub.add_parser("bridge", help="the parent tool bridge (sandbox side)")
    bridge_sub = bridge.add_subparsers(dest="bridge_command", required=True)

    call = bridge_sub.add_parser("call", help="call a parent tool through the bridge")
    call.add_argument(
        "--parent-tool-bridge",
        required=True,
        help="the wp-codebox/parent-tool-bridge/v1 envelope as JSON (or @file)",
    )
    call.add_argument("tool", metavar="TOOL")
    call.add_argument("--input", default=None, help="the tool input as a JSON object (or @file)")
    call.add_argument("--request-id", default=None, help="reuse an id to replay a side effect")
    call.add_argument("--capability", choices=["read", "write"], default=None)
    call.set_defaults(func=_call)

    relay_cmd = bridge_sub.add_parser(
        "relay", help="host_command program: relay a request on stdin to a gateway"
    )
    relay_cmd.add_argument("--url-env", default=ENDPOINT_ENV)
    relay_cmd.add_argument("--token-env", default=TOKEN_ENV)
    relay_cmd.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    relay_cmd.set_defaults(func=_relay)


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="gateway")
    add_commands(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args()
    sys.exit(ns.func(ns))
