"""The approval round trip against a bare tab round trip, in the same run.

One task's tab is a websocket client here (the person answers the moment the request
arrives, so the person's time is nil and what is left is the gateway's):

- tab: `TabHub.send(identity, ShowRunProgress(...))`, the UI action's round trip through
  the tab channel and back (the baseline);
- ui call: the same round trip as a tool call (`ui.show_run_progress`) through the pipeline,
  with its evidence: what any tool call that touches the tab costs;
- approval: a call of a tool the task's policy `required`s: the request is stored, sent to
  the tab, answered there (nonce, binding, one conditional update), recorded, and then the
  tool runs and its evidence is committed.

Rounds are interleaved so drift hits all three the same way. Goal: the approval round
trip's p50 within 1.5x the ui call's (the person's time excluded, as here), and reported
against the bare tab round trip too.

Then, in the same run, the round trip at the MCP door as an agent's client sees it, the
official Python SDK client answering each form at once ("approve once"), interleaved:

- stateful: a 2025-11-25 session; the form is a request on the call's response stream;
- stateless: a 2026-07-28 client; the call answers `input_required`, and the client's
  retry carries the answer (two HTTP exchanges, the call parked between them).

Goal: the stateless round trip's p50 within 1.2x the stateful one's.
Run: `python -m bench.approvals [--rounds N] [--door-rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect

from bench.report import summary, write
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.http import health, tasks
from gateway.tabs import ShowRunProgress, TabHub, install
from gateway.testing import live_gateway, test_settings

GOAL = 1.5
STATELESS_GOAL = 1.2
MS = 1e3
ORIGIN = "http://127.0.0.1:8765"


class Empty(BaseModel):
    pass


async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, bool]:
    return {"done": True}


NOOP = Tool("bench.guarded", "Guarded no-op", "Runs once a person approves", Empty, noop)


async def tab(ws: ClientConnection, task_id: str, tab_id: str) -> None:
    """The page and its person: reply to every action, approve every approval at once."""
    async for raw in ws:
        frame = json.loads(raw)
        kind = frame["type"]
        if kind == "request":
            reply = {
                "type": "reply",
                "id": frame["id"],
                "task_id": task_id,
                "tab_id": tab_id,
                "revision": frame["revision"],
                "ok": True,
                "result": {"shown": frame["action"]["run_id"]},
            }
            await ws.send(json.dumps(reply))
        elif kind == "approval_request" and frame.get("answerable"):
            answer = {
                "type": "approval",
                "id": frame["id"],
                "task_id": task_id,
                "tab_id": tab_id,
                "revision": frame["revision"],
                "nonce": frame["nonce"],
                "decision": "approve",
            }
            await ws.send(json.dumps(answer))
        elif kind == "ping":
            await ws.send(json.dumps({"type": "pong"}))


def add_tool(gw: Any) -> None:
    gw.registry.add(NOOP)


async def door_rounds(rounds: int) -> dict[str, list[float]]:
    """Approved calls through the MCP door, stateful and stateless clients interleaved."""
    import httpx2
    import mcp_types as types
    from mcp.client.session import ClientRequestContext
    from mcp.client.streamable_http import streamable_http_client

    from gateway import mcp_door
    from mcp import Client

    async def approve_once(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        del context, params  # every question answered the same, at once
        return types.ElicitResult(action="accept", content={"decision": "approve once"})

    samples: dict[str, list[float]] = {"legacy": [], "auto": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with live_gateway(
            test_settings(Path(tmp)),
            setup=add_tool,
            extensions=[health.routes, tasks.routes, mcp_door.install],
        ) as live:
            body = {
                "actor": {"id": "user_1", "role": "member"},
                "org_id": "org_bench",
                "sandbox": {"id": "sb_1", "app_origin": "http://127.0.0.1:9"},
                "scopes": ["ui"],
                "approvals": {"required": [NOOP.name], "channels": ["elicitation"]},
            }
            created = (await live.http.post("/v1/tasks", json=body, headers=live.control)).json()
            headers = {"authorization": f"Bearer {created['tokens']['agent']}"}
            url = f"{live.base_url}/v1/mcp"
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
                Client(
                    streamable_http_client(url, http_client=http),
                    mode="legacy",
                    elicitation_callback=approve_once,
                ) as legacy,
                Client(
                    streamable_http_client(url, http_client=http),
                    mode="auto",
                    elicitation_callback=approve_once,
                ) as auto,
            ):
                clients = {"legacy": legacy, "auto": auto}
                warmup = max(20, rounds // 10)
                for i in range(warmup + rounds):
                    for kind in ("legacy", "auto") if i % 2 else ("auto", "legacy"):
                        t0 = time.perf_counter()
                        result = await clients[kind].call_tool("bench_guarded", {})
                        spent = time.perf_counter() - t0
                        if result.is_error:
                            raise RuntimeError(f"{kind}: {result.content}")
                        if i >= warmup:
                            samples[kind].append(spent)
    return samples


async def run(rounds: int, door_round_count: int = 200) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        settings = test_settings(Path(tmp), dashboard_origins=[ORIGIN])
        async with live_gateway(
            settings,
            setup=add_tool,
            extensions=[health.routes, tasks.routes, install],
        ) as live:
            gw = live.gateway
            body = {
                "actor": {"id": "user_1", "role": "member"},
                "org_id": "org_bench",
                "sandbox": {"id": "sb_1", "app_origin": "http://127.0.0.1:9"},
                "scopes": ["ui"],
                "approvals": {"required": [NOOP.name], "channels": ["tab"]},
            }
            created = (await live.http.post("/v1/tasks", json=body, headers=live.control)).json()
            identity = await gw.tasks.authenticate(created["tokens"]["agent"], Purpose.AGENT)
            hub = gw.services.get(TabHub)
            async with connect(live.ws_url, origin=ORIGIN) as ws:  # type: ignore[arg-type]
                hello = {
                    "type": "hello",
                    "token": created["tokens"]["tab"],
                    "tab_id": "tab_bench",
                    "revision": 0,
                    "view": {"view": "runs", "params": {}, "selection": {}},
                }
                await ws.send(json.dumps(hello))
                assert json.loads(await ws.recv())["type"] == "welcome"
                page = asyncio.create_task(tab(ws, identity.task_id, "tab_bench"))
                samples: dict[str, list[float]] = {"tab": [], "ui": [], "approval": []}
                failures: list[str] = []
                warmup = max(50, rounds // 10)
                order = ["tab", "ui", "approval"]
                for i in range(warmup + rounds):
                    for kind in order[i % 3 :] + order[: i % 3]:
                        t0 = time.perf_counter()
                        ok = await measure(kind, gw, hub, identity, i)
                        spent = time.perf_counter() - t0
                        if not ok:
                            failures.append(kind)
                        elif i >= warmup:
                            samples[kind].append(spent)
                page.cancel()
            listed = await gw.approvals.listing(identity.task_id)
    approved = sum(1 for a in listed if a["status"] == "approved")
    samples.update(await door_rounds(door_round_count))
    stats = {k: summary([s * MS for s in v]) for k, v in samples.items()}
    ratio_stateless = stats["auto"]["p50"] / stats["legacy"]["p50"]
    ratio_ui = stats["approval"]["p50"] / stats["ui"]["p50"]
    ratio_tab = stats["approval"]["p50"] / stats["tab"]["p50"]
    rows: list[dict[str, Any]] = [
        {"path": "bare tab round trip (ms)", **stats["tab"]},
        {"path": "ui tool call, one tab round trip (ms)", **stats["ui"]},
        {"path": "approval round trip, then the call (ms)", **stats["approval"]},
        {
            "path": "ratio approval/ui call",
            "n": rounds,
            "p50": ratio_ui,
            "p99": stats["approval"]["p99"] / stats["ui"]["p99"],
        },
        {
            "path": "ratio approval/bare tab",
            "n": rounds,
            "p50": ratio_tab,
            "p99": stats["approval"]["p99"] / stats["tab"]["p99"],
        },
    ]
    rows += [
        {"path": "MCP door, stateful client, approved call (ms)", **stats["legacy"]},
        {"path": "MCP door, stateless client, approved call (ms)", **stats["auto"]},
        {
            "path": "ratio stateless/stateful",
            "n": door_round_count,
            "p50": ratio_stateless,
            "p99": stats["auto"]["p99"] / stats["legacy"]["p99"],
        },
    ]
    met_stateless = ratio_stateless <= STATELESS_GOAL
    met = ratio_ui <= GOAL and not failures and met_stateless
    write(
        "approvals",
        rows,
        {
            "goal": {"p50_ratio_to_ui_call": GOAL, "p50_stateless_to_stateful": STATELESS_GOAL},
            "met": met,
            "met_stateless": met_stateless,
            "approved": approved,
            "failures": failures,
        },
    )
    print(
        f"approval p50 {ratio_ui:.2f}x a ui call, {ratio_tab:.2f}x a bare tab round trip "
        f"(goal {GOAL}x the ui call); {approved} approvals stored; at the MCP door a "
        f"stateless client's approved call {ratio_stateless:.2f}x a stateful one's "
        f"(goal {STATELESS_GOAL}x): {'met' if met_stateless else 'NOT met'}"
    )
    return 0 if met else 2


async def measure(kind: str, gw: Any, hub: TabHub, identity: Any, i: int) -> bool:
    if kind == "tab":
        outcome = await hub.send(identity, ShowRunProgress(run_id=f"run_{i:05d}"), timeout_s=30)
        return outcome.ok
    if kind == "ui":
        result = await gw.pipeline.call(
            identity, "ui.show_run_progress", {"run_id": f"run_{i:05d}"}, door=Door.MCP
        )
        return bool(result.ok)
    result = await gw.pipeline.call(identity, NOOP.name, {}, door=Door.MCP)
    return bool(result.ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--door-rounds", type=int, default=200)
    args = parser.parse_args()
    return asyncio.run(run(args.rounds, args.door_rounds))


if __name__ == "__main__":
    sys.exit(main())
