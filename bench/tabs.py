"""The tab channel's UI-action round trip against a raw websocket echo, in the same run.

With 32 dashboard tabs connected (32 tasks, each page with the shim), one page is measured:

- action: `TabHub.send(identity, ShowRunProgress(...))` from the gateway, through the tab
  channel (validation, request frame, the shim's allowlist check, the page's handler setting
  textContent, the reply, the reply rules) back to the awaiting coroutine;
- raw: the same page echoes a frame of the same size over a bare websocket to a bare
  Starlette endpoint on the same server; timed from send to receive on the server. The
  echo does the page-side work the action's handler does (it shows the frame's run id in a
  span with textContent) before it sends the frame back, so the ratio compares the
  channel's own cost (gateway, shim) over the same page work, not the page's DOM write.

Rounds are interleaved so drift hits both the same way. Goals: action p50 within 1.3x of the
raw round trip, p99 within 2x. Run: `python -m bench.tabs [--rounds N] [--tabs N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from bench.report import summary, write
from gateway.browser.chromium import find_chromium, launch_args
from gateway.core.tokens import Purpose
from gateway.http import health, tasks
from gateway.serving import serving
from gateway.tabs import ShowRunProgress, TabHub, install
from gateway.testing import LiveGateway, live_gateway, test_settings

P50_GOAL = 1.3
P99_GOAL = 2.0
MS = 1e3

PAGE = """<!doctype html><html><head><title>bench</title></head><body>
<span id="run"></span> <span id="echoed"></span>
<script type="module">
window.start = async (options) => {
  const { connectGateway } = await import(options.gateway + "/webmcp.js");
  window.session = await connectGateway({
    ...options,
    webmcp: false,
    actions: { show_run_progress({ run_id }) {
      document.getElementById("run").textContent = run_id; return { shown: run_id }; } },
    view: () => ({ view: "runs", params: {}, selection: {} }),
  });
};
window.echo = (url) => new Promise((resolve) => {
  const ws = new WebSocket(url);
  ws.onmessage = (event) => {
    // What the action's handler does with its run_id, done with the echoed frame's.
    const data = event.data;
    const at = data.lastIndexOf("run_");
    document.getElementById("echoed").textContent = data.slice(at, at + 9);
    ws.send(data);
  };
  ws.onopen = () => resolve(true);
});
</script></body></html>"""


class Echo:
    """A bare websocket endpoint: what the page sends back arrives in `inbox`."""

    def __init__(self) -> None:
        self.ws: WebSocket | None = None
        self.ready = asyncio.Event()
        self.inbox: asyncio.Queue[str] = asyncio.Queue()

    async def endpoint(self, ws: WebSocket) -> None:
        await ws.accept()
        self.ws = ws
        self.ready.set()
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            self.inbox.put_nowait(message.get("text") or "")

    async def round_trip(self, payload: str) -> float:
        assert self.ws is not None
        t0 = time.perf_counter()
        await self.ws.send_text(payload)
        await self.inbox.get()
        return time.perf_counter() - t0


def page_app() -> Starlette:
    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    return Starlette(routes=[Route("/", page)])


@contextlib.asynccontextmanager
async def gateway(origin: str, echo: Echo, data: Path) -> AsyncIterator[LiveGateway]:
    async with live_gateway(
        test_settings(data, dashboard_origins=[origin]),
        extensions=[health.routes, tasks.routes, install],
        extra_routes=[WebSocketRoute("/bench/echo", echo.endpoint)],
    ) as live:
        yield live


async def run(rounds: int, tab_count: int, loop: str = "asyncio") -> int:
    from playwright.async_api import async_playwright

    echo = Echo()
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            serving(page_app()) as origin,
            gateway(origin, echo, Path(tmp)) as live,
            async_playwright() as pw,
        ):
            base_url, http, gw = live.base_url, live.http, live.gateway
            browser = await pw.chromium.launch(executable_path=find_chromium(), args=launch_args())
            identities = []
            pages = []
            for i in range(tab_count):
                body = {
                    "actor": {"id": f"user_{i}", "role": "member"},
                    "org_id": f"org_{i % 4}",
                    "sandbox": {"id": f"sb_{i}", "app_origin": "http://127.0.0.1:9"},
                    "scopes": ["ui"],
                }
                created = await http.post("/v1/tasks", json=body, headers=live.control)
                token = created.json()["tokens"]["tab"]
                identities.append(await gw.tasks.authenticate(token, Purpose.TAB))
                # A context (a window) per tab: every dashboard is a foreground page, as
                # 32 users' tabs would be; background pages of one window get throttled.
                context = await browser.new_context()
                page = await context.new_page()
                await page.goto(origin + "/")
                await page.wait_for_function("typeof window.start === 'function'")
                await page.evaluate("(o) => window.start(o)", {"gateway": base_url, "token": token})
                pages.append(page)
            hub = gw.services.get(TabHub)
            connected = sum(1 for ident in identities if hub.describe(ident.task_id)["connected"])
            measured, identity = pages[0], identities[0]
            await measured.evaluate(
                "(u) => window.echo(u)", base_url.replace("http", "ws") + "/bench/echo"
            )
            await echo.ready.wait()
            # A raw frame the size of a request frame, so both carry the same bytes.
            sample = json.dumps(
                {
                    "type": "request",
                    "id": "req_0123456789abcdef0123",
                    "task_id": identity.task_id,
                    "revision": 0,
                    "action": {"type": "show_run_progress", "run_id": "run_00000"},
                    "expires_at": time.time(),
                }
            )
            action_s: list[float] = []
            raw_s: list[float] = []
            failures: list[str] = []
            warmup = max(50, rounds // 10)
            for i in range(warmup + rounds):
                # Alternate which goes first, so neither always follows the other's work.
                if i % 2:
                    raw = await echo.round_trip(sample)
                t0 = time.perf_counter()
                outcome = await hub.send(
                    identity, ShowRunProgress(run_id=f"run_{i:05d}"), timeout_s=30
                )
                spent = time.perf_counter() - t0
                if not i % 2:
                    raw = await echo.round_trip(sample)
                if not outcome.ok:
                    # Counted, not measured: a machine stall long enough to time out.
                    failures.append(outcome.status.value)
                    continue
                if i >= warmup:
                    action_s.append(spent)
                    raw_s.append(raw)
            shown = await measured.text_content("#run")
            await browser.close()
    action = summary([s * MS for s in action_s])
    raw_summary = summary([s * MS for s in raw_s])
    p50_ratio = action["p50"] / raw_summary["p50"]
    p99_ratio = action["p99"] / raw_summary["p99"]
    rows = [
        {"path": "raw websocket echo (ms)", **raw_summary},
        {"path": "UI action round trip (ms)", **action},
        {
            "path": "ratio action/raw",
            "n": rounds,
            "p50": p50_ratio,
            "p99": p99_ratio,
            "mean": action["mean"] / raw_summary["mean"],
        },
    ]
    ok = p50_ratio <= P50_GOAL and p99_ratio <= P99_GOAL and not failures
    write(
        "tabs",
        rows,
        {
            "tabs_connected": connected,
            "event_loop": loop,
            "goals": {"p50_ratio": P50_GOAL, "p99_ratio": P99_GOAL},
            "met": ok,
            "last_shown": shown,
            "failed_actions": failures,
        },
    )
    print(
        f"{connected} tabs connected; p50 {p50_ratio:.2f}x (goal {P50_GOAL}x), "
        f"p99 {p99_ratio:.2f}x (goal {P99_GOAL}x): {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--tabs", type=int, default=32)
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="the event loop; `gateway serve` runs on uvloop when it is installed",
    )
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        return uvloop.run(run(args.rounds, args.tabs, args.loop))
    return asyncio.run(run(args.rounds, args.tabs, args.loop))


if __name__ == "__main__":
    sys.exit(main())
