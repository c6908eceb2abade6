"""The shipped `host_command` program: relay one request envelope to a gateway over HTTP.

    gateway bridge relay  < request.json  > result.json
    python -m gateway.bridge.relay  < request.json  > result.json   (the same, faster start)

It reads a `wp-codebox/parent-tool-request/v1` envelope from stdin, posts it to the URL in
`WP_CODEBOX_PARENT_TOOL_ENDPOINT` with the Bearer token in `WP_CODEBOX_PARENT_TOOL_TOKEN`
(other variable names by flag), and writes the `wp-codebox/parent-tool-result/v1` envelope
to stdout, whatever its status, so a bridge in `host_command` mode whose argv is this
program works out of the box. It exits 0 only when the call succeeded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from typing import BinaryIO, TextIO

from gateway.bridge.dispatch import MAX_RESULT_BYTES, EndpointDispatch, unavailable
from gateway.bridge.envelopes import (
    DEFAULT_TIMEOUT_MS,
    ParentToolRequest,
    ParentToolResult,
    failure,
)
from gateway.bridge.schemas import ENDPOINT_ENV, REQUEST_SCHEMA, TOKEN_ENV
from gateway.bridge.validation import EnvelopeInvalid, load_json, parse_envelope


async def relay(
    raw: bytes,
    env: Mapping[str, str],
    *,
    url_env: str = ENDPOINT_ENV,
    token_env: str = TOKEN_ENV,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> ParentToolResult:
    if len(raw) > MAX_RESULT_BYTES:
        return failure("failed", "payload_too_large", "the request envelope is too large")
    try:
        request = parse_envelope(ParentToolRequest, load_json(raw), REQUEST_SCHEMA)
    except EnvelopeInvalid as exc:
        return failure("failed", "invalid_input", exc.message, diagnostics=exc.diagnostics())
    url = env.get(url_env, "").strip()
    token = env.get(token_env, "").strip()
    if not url or not token:
        missing = url_env if not url else token_env
        return unavailable(
            request, f"{missing} is not set: the relay has no gateway to reach", retryable=False
        )
    return await EndpointDispatch(url, token).send(request, timeout_ms / 1000)


def run(
    env: Mapping[str, str],
    *,
    url_env: str = ENDPOINT_ENV,
    token_env: str = TOKEN_ENV,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    stdin: BinaryIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    source = stdin or sys.stdin.buffer
    sink = stdout or sys.stdout
    raw = source.read(MAX_RESULT_BYTES + 1)
    result = asyncio.run(
        relay(raw, env, url_env=url_env, token_env=token_env, timeout_ms=timeout_ms)
    )
    sink.write(result.model_dump_json(by_alias=True, exclude_none=True) + "\n")
    sink.flush()
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gateway-bridge-relay", description="relay a parent-tool request to a gateway"
    )
    parser.add_argument("--url-env", default=ENDPOINT_ENV)
    parser.add_argument("--token-env", default=TOKEN_ENV)
    parser.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    args = parser.parse_args(argv)
    return run(
        os.environ, url_env=args.url_env, token_env=args.token_env, timeout_ms=args.timeout_ms
    )


if __name__ == "__main__":
    sys.exit(main())
