"""No-op tool latency through the gateway's MCP door, against its floors in the same run.

Three servers, each in its own process, serve the same no-op tool:
- `gateway`: the gateway's `/v1/mcp` (bearer check, catalog, pipeline with its evidence
  committed, SDK transport);
- `bare sdk`: the official MCP SDK's low-level server with its streamable HTTP app, at the
  SDK's defaults, and nothing else (the goal's baseline); `bare sdk json` is the same in
  the SDK's JSON-response, stateless mode, its cheapest, shown for the per-request form;
- `bare handler`: a Starlette route that parses a JSON-RPC request and answers it.

One client measures them all, interleaved round by round so drift hits each the same way:
a plain httpx client posting JSON-RPC `tools/call` (the 2026-07-28 per-request form, and
the handshake form inside a session), then the official SDK client's `call_tool`.
Goal: gateway p50 within 1.3x of the bare SDK server. Run: `python -m bench.mcp`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench.report import summary, write
from gateway.core.registry import exposed_name
from gateway.testing import CONTROL_KEY, test_settings

GOAL_VS_SDK = 1.3
TOOL = "bench.noop"
# The name clients call it by, as the gateway lists it (and the plain SDK server too).
CALLED = exposed_name(TOOL)
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
MS = 1e3
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


# -- the three servers (each run in a child process: `python -m bench.mcp --serve X`) ------


def gateway_app(data_dir: Path, *, evidence: bool = True) -> Any:
    from pydantic import BaseModel

    from gateway import mcp_door
    from gateway.app import build_app
    from gateway.core.registry import ToolAnnotations, ToolContext
    from gateway.http import health, tasks
    from gateway.runtime import Gateway

    class Empty(BaseModel):
        pass

    gw = Gateway(test_settings(data_dir))

    @gw.registry.tool(
        TOOL,
        title="No-op",
        description="Does nothing.",
        input_model=Empty,
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        return {"ok": True}

    if not evidence:
        # Diagnostic only: the same door and pipeline, with the evidence commit skipped,
        # to show how much of the gap to the bare SDK is the durable evidence write.
        async def skip(_rows: Any) -> None:
            return None

        gw.store.commit = skip  # type: ignore[method-assign,assignment]

    # The core routes and the MCP door: the parts a tool call through MCP goes through
    # (the browser pool would only add a Chromium to this process's load).
    return build_app(gateway=gw, extensions=[health.routes, tasks.routes, mcp_door.install])


def bare_sdk_app(json_mode: bool = False) -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=CALLED,
                    description="Does nothing.",
                    input_schema={"type": "object", "properties": {}},
                )
            ]
        )

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        output = {"ok": True}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(output))], structured_content=output
        )

    server: Server[Any] = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app(
        streamable_http_path="/v1/mcp", json_response=json_mode, stateless_http=json_mode
    )


def bare_handler_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def rpc(request: Request) -> JSONResponse:
        message = await request.json()
        output = {"ok": True}
        return JSONResponse(
            {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": {
                    "content": [{"type": "text", "text": json.dumps(output)}],
                    "structuredContent": output,
                    "isError": False,
                },
            }
        )

    return Starlette(routes=[Route("/v1/mcp", rpc, methods=["POST"])])


def serve(kind: str, port: int) -> None:
    import uvicorn

    with tempfile.TemporaryDirectory() as tmp:
        app = {
            "gateway": lambda: gateway_app(Path(tmp)),
            "gateway, no evidence": lambda: gateway_app(Path(tmp), evidence=False),
            "bare sdk": bare_sdk_app,
            "bare sdk json": lambda: bare_sdk_app(json_mode=True),
            "bare handler": bare_handler_app,
        }[kind]()
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


@contextlib.asynccontextmanager
async def child_server(kind: str) -> AsyncIterator[str]:
    from gateway.serving import free_port

    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.mcp",
        "--serve",
        kind,
        "--port",
        str(port),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    await probe.get(base + "/")
                    break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"{kind} did not start")
        yield base
    finally:
        proc.terminate()
        await proc.wait()


# -- the client side -------------------------------------------------------------------------

Call = Callable[[], Awaitable[None]]


def _call_body(request_id: int, modern: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"name": CALLED, "arguments": {}}
    if modern:
        params["_meta"] = ENVELOPE
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _check(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    text = response.text
    if '"isError":true' in text or '"ok":true' not in text.replace(" ", ""):
        raise RuntimeError(f"unexpected answer: {text[:200]}")


async def raw_modern(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Call:
    counter = iter(range(1, 10**9))
    sent = {
        **ACCEPT,
        **headers,
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": CALLED,
    }

    async def call() -> None:
        _check(await http.post(url, json=_call_body(next(counter), True), headers=sent))

    return call


async def raw_session(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Call:
    """The handshake protocol: initialize once, then every call names the session."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    opened = await http.post(url, json=init, headers={**ACCEPT, **headers})
    session = opened.headers.get("mcp-session-id")
    sent = {**ACCEPT, **headers, "mcp-protocol-version": HANDSHAKE}
    if session:
        sent["mcp-session-id"] = session
        await http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sent
        )
    counter = iter(range(1, 10**9))

    async def call() -> None:
        _check(await http.post(url, json=_call_body(next(counter), False), headers=sent))

    return call


async def create_task(base: str) -> str:
    async with httpx.AsyncClient(base_url=base) as http:
        response = await http.post(
            "/v1/tasks",
            headers={"authorization": f"Bearer {CONTROL_KEY}"},
            json={
                "actor": {"id": "bench", "role": "admin"},
                "org_id": "org_bench",
                "sandbox": {"id": "sb", "app_origin": "http://127.0.0.1:9"},
                "scopes": [],
            },
        )
        response.raise_for_status()
        token: str = response.json()["tokens"]["agent"]
        return token


async def timed(call: Call, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return samples


async def interleaved(
    calls: dict[str, Call], rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Alternate call by call, so a busy moment of the machine lands on every server alike."""
    for call in calls.values():  # warm up every path first
        await timed(call, 50)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds * per_round):
        for name, call in calls.items():
            t0 = time.perf_counter()
            await call()
            samples[name].append(time.perf_counter() - t0)
    return samples


async def measure(rounds: int, per_round: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from mcp import Client

    async with (
        child_server("gateway") as gateway,
        child_server("gateway, no evidence") as bare_gateway,
        child_server("bare sdk") as sdk,
        child_server("bare sdk json") as sdk_json,
        child_server("bare handler") as handler,
    ):
        auth = {"authorization": f"Bearer {await create_task(gateway)}"}
        diag = {"authorization": f"Bearer {await create_task(bare_gateway)}"}
        limits = httpx.Limits(max_keepalive_connections=4)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            per_request = await interleaved(
                {
                    "gateway": await raw_modern(http, gateway + "/v1/mcp", auth),
                    "gateway, no evidence": await raw_modern(http, bare_gateway + "/v1/mcp", diag),
                    "bare sdk": await raw_modern(http, sdk + "/v1/mcp", {}),
                    "bare sdk json": await raw_modern(http, sdk_json + "/v1/mcp", {}),
                    "bare handler": await raw_modern(http, handler + "/v1/mcp", {}),
                },
                rounds,
                per_round,
            )
            in_session = await interleaved(
                {
                    "gateway": await raw_session(http, gateway + "/v1/mcp", auth),
                    "gateway, no evidence": await raw_session(http, bare_gateway + "/v1/mcp", diag),
                    "bare sdk": await raw_session(http, sdk + "/v1/mcp", {}),
                    "bare handler": await raw_session(http, handler + "/v1/mcp", {}),
                },
                rounds,
                per_round,
            )

        async with (
            httpx2.AsyncClient(headers=auth) as gw_http,
            httpx2.AsyncClient() as sdk_http,
            Client(streamable_http_client(gateway + "/v1/mcp", http_client=gw_http)) as gw_client,
            Client(streamable_http_client(sdk + "/v1/mcp", http_client=sdk_http)) as sdk_client,
        ):

            def sdk_call(client: Client) -> Call:
                async def call() -> None:
                    result = await client.call_tool(CALLED, {})
                    if result.is_error:
                        raise RuntimeError(str(result.structured_content))

                return call

            with_sdk_client = await interleaved(
                {"gateway": sdk_call(gw_client), "bare sdk": sdk_call(sdk_client)},
                rounds,
                per_round // 2,
            )

    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    for client_name, samples in (
        ("httpx, 2026-07-28 per-request POST", per_request),
        ("httpx, handshake session POST", in_session),
        ("MCP SDK Client.call_tool", with_sdk_client),
    ):
        sdk_p50 = summary(samples["bare sdk"])["p50"]
        handler_p50 = summary(samples["bare handler"])["p50"] if "bare handler" in samples else None
        for server, values in samples.items():
            stats = summary(values)
            row: dict[str, Any] = {
                "client": client_name,
                "server": server,
                "n": stats["n"],
                "p50 ms": stats["p50"] * MS,
                "p99 ms": stats["p99"] * MS,
                "vs sdk p50": stats["p50"] / sdk_p50,
            }
            if handler_p50 is not None:
                row["vs handler p50"] = stats["p50"] / handler_p50
            rows.append(row)
            if server == "gateway":
                ratios[client_name] = stats["p50"] / sdk_p50
    notes = {
        "goal": f"gateway p50 <= {GOAL_VS_SDK}x bare SDK p50",
        "gateway vs sdk p50": ratios,
        "met": all(r <= GOAL_VS_SDK for r in ratios.values()),
    }
    return rows, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=200)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return 0
    rows, notes = asyncio.run(measure(args.rounds, args.per_round))
    write("mcp", rows, notes)
    print(
        f"goal: {notes['goal']}: {'met' if notes['met'] else 'NOT met'} "
        f"({', '.join(f'{k}: {v:.2f}x' for k, v in notes['gateway vs sdk p50'].items())})"
    )
    # Nonzero when the goal is not met, as `python -m bench` expects of every area.
    return 0 if notes["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
