"""A no-op tool through WebMCP against a bare websocket echo through the same page.

One dashboard page connects with the shim (`webmcp: true`) in a Chromium with native
WebMCP; the task's catalog holds a no-op tool. Every path is driven by the same client,
Playwright, and crosses the same page and the same kind of websocket to the same server:

- webmcp: `page.webmcp.call_tool("bench_noop", {})` (the tool `bench.noop` under the name
  strict clients accept): Chromium's WebMCP, the shim's
  `execute`, a `tool_call` frame, the registry pipeline with its evidence committed, the
  `tool_result` frame, back to the caller;
- floor: `page.webmcp.call_tool("bench.echo", {})`, a WebMCP tool the page registers
  itself, whose `execute` sends a frame of the same size over a bare websocket to an echo
  endpoint on the same server and resolves on the answer: the same trip an agent's call
  makes, through the same WebMCP dispatch, without the gateway;
- reference: `page.evaluate(...)` of that same echo, without WebMCP (what Chromium's
  WebMCP dispatch and Playwright's `call_tool` add on their own is the difference).

Rounds rotate. Goal: WebMCP p50 within 1.5x of the floor. Run: `python -m bench.webmcp`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from bench.report import summary, write
from gateway.browser.chromium import find_chromium, launch_args
from gateway.core.registry import Tool, ToolContext, exposed_name
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.tabs import install
from gateway.testing import live_gateway, test_settings

P50_GOAL = 1.5
MS = 1e3
# The no-op's name on the page: WebMCP lists a gateway tool under its exposed name.
NOOP = exposed_name("bench.noop")

PAGE = """<!doctype html><html><head><title>bench</title></head><body>
<script type="module">
window.start = async (options) => {
  const { connectGateway } = await import(options.gateway + "/webmcp.js");
  window.session = await connectGateway({
    ...options, webmcp: true, actions: {},
    view: () => ({ view: "runs", params: {}, selection: {} }),
  });
};
window.openEcho = (url) => new Promise((resolve) => {
  window.echoSocket = new WebSocket(url);
  window.echoSocket.onopen = () => resolve(true);
});
window.echoOnce = (payload) => new Promise((resolve) => {
  window.echoSocket.onmessage = (event) => resolve(event.data.length);
  window.echoSocket.send(payload);
});
window.registerEcho = (payload) => document.modelContext.registerTool({
  name: "bench.echo",
  description: "A bare websocket echo",
  inputSchema: { type: "object", properties: {} },
  execute: async () => ({ bytes: await window.echoOnce(payload) }),
}).catch(() => {});
</script></body></html>"""


class Empty(BaseModel):
    pass


async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, Any]:
    return {"ok": True}


async def echo(ws: WebSocket) -> None:
    await ws.accept()
    try:
        while True:
            await ws.send_text(await ws.receive_text())
    except WebSocketDisconnect:
        return


async def page(_request: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


async def run(rounds: int) -> int:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        async with serving(Starlette(routes=[Route("/", page)])) as origin:

            def add_noop(gw: Gateway) -> None:
                gw.registry.add(
                    Tool(
                        "bench.noop", "No-op", "Does nothing", Empty, noop, scopes=frozenset({"ui"})
                    )
                )

            async with (
                live_gateway(
                    test_settings(Path(tmp), dashboard_origins=[origin]),
                    setup=add_noop,
                    extensions=[health.routes, tasks.routes, install],
                    extra_routes=[WebSocketRoute("/bench/echo", echo)],
                ) as live,
                async_playwright() as pw,
            ):
                base_url, http, gw = live.base_url, live.http, live.gateway
                created = await http.post(
                    "/v1/tasks",
                    json={
                        "actor": {"id": "bench", "role": "member"},
                        "org_id": "org_bench",
                        "sandbox": {"id": "sb", "app_origin": "http://127.0.0.1:9"},
                        "scopes": ["ui"],
                        "allowed_tools": ["bench.noop"],
                    },
                    headers=live.control,
                )
                token = created.json()["tokens"]["tab"]
                browser = await pw.chromium.launch(
                    executable_path=find_chromium(), args=launch_args(webmcp=True)
                )
                tab = await (await browser.new_context()).new_page()
                await tab.goto(origin + "/")
                await tab.wait_for_function("typeof window.start === 'function'")
                await tab.evaluate("(o) => window.start(o)", {"gateway": base_url, "token": token})
                await tab.evaluate(
                    "(u) => window.openEcho(u)", base_url.replace("http", "ws") + "/bench/echo"
                )
                # A frame the size of a tool_call frame, so every path carries the same bytes.
                sample = json.dumps(
                    {
                        "type": "tool_call",
                        "id": "call_0123456789abcdef",
                        "tool": "bench.noop",
                        "input": {},
                        "source": "webmcp",
                    }
                )
                await tab.evaluate("(p) => window.registerEcho(p)", sample)
                for _ in range(100):
                    names = {t["name"] for t in await tab.webmcp.tools()}
                    if {NOOP, "bench.echo"} <= names:
                        break
                    await asyncio.sleep(0.05)
                paths: dict[str, Callable[[], Awaitable[Any]]] = {
                    "webmcp": lambda: tab.webmcp.call_tool(NOOP, {}),
                    "floor": lambda: tab.webmcp.call_tool("bench.echo", {}),
                    "reference": lambda: tab.evaluate("(p) => window.echoOnce(p)", sample),
                }
                samples: dict[str, list[float]] = {name: [] for name in paths}
                names_in_turn = list(paths)
                warmup = max(20, rounds // 10)
                for i in range(warmup + rounds):
                    shift = i % len(names_in_turn)
                    for name in names_in_turn[shift:] + names_in_turn[:shift]:
                        t0 = time.perf_counter()
                        await paths[name]()
                        spent = time.perf_counter() - t0
                        if i >= warmup:
                            samples[name].append(spent)
                calls = await gw.store.usage(created.json()["task_id"])
                await browser.close()
    w, f, r = (summary([s * MS for s in samples[n]]) for n in ("webmcp", "floor", "reference"))
    ratio = w["p50"] / f["p50"]
    rows = [
        {"path": "reference: bare websocket echo by page.evaluate (ms)", **r},
        {"path": "floor: bare websocket echo as a WebMCP tool of the page (ms)", **f},
        {"path": "no-op tool through WebMCP and the gateway (ms)", **w},
        {"path": "ratio webmcp/floor", "n": rounds, "p50": ratio, "p99": w["p99"] / f["p99"]},
        {"path": "ratio webmcp/reference", "n": rounds, "p50": w["p50"] / r["p50"]},
    ]
    ok = ratio <= P50_GOAL
    write("webmcp", rows, {"goals": {"p50_ratio": P50_GOAL}, "met": ok, "calls": calls[0]})
    print(f"WebMCP p50 {ratio:.2f}x its floor (goal {P50_GOAL}x): {'met' if ok else 'NOT met'}")
    return 0 if ok else 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    return asyncio.run(run(100 if args.quick else args.rounds))


if __name__ == "__main__":
    sys.exit(main())
