"""Parent tool bridge latency, against its floors measured in the same run.

One gateway on loopback serves a no-op tool. Measured, interleaved round by round:
- `pipeline` (floor 1): the call through the registry pipeline in-process, evidence
  committed;
- `bare http` (floor 2): a plain Starlette route on the same server answering a JSON POST
  of the same size, on a kept-alive connection;
- `artifact write` (floor 3): storing a transcript-sized artifact in-process (file written
  and fsynced, row committed), which the contract requires of every call;
- `host dispatcher`: `POST /v1/parent-tools` on a kept-alive connection (bearer check,
  envelope validation, allowlist, pipeline, redacted transcript persisted as an artifact);
- `client, host_endpoint`: `BridgeClient.call`, a new connection per call, as a sandbox
  process calling once would;
- `client, host_command`: `BridgeClient.call` through the shipped relay program (one
  Python process per call), fewer rounds.

Goal: host dispatcher p50 within 1.5x of the sum of the three floors' p50. Run:
`python -m bench.bridge [--rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bench.report import summary, write

GOAL = 1.5
MS = 1e3


class Empty(BaseModel):
    pass


def _row(name: str, samples: list[float], floor: float | None = None) -> dict[str, Any]:
    s = summary(samples)
    row: dict[str, Any] = {
        "measure": name,
        "n": s["n"],
        "p50 ms": s["p50"] * MS,
        "p99 ms": s["p99"] * MS,
    }
    if floor is not None:
        row["ratio p50 vs floor"] = s["p50"] / floor
    return row


async def measure(rounds: int, command_rounds: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from gateway.bridge import BridgeClient, as_host_command, install
    from gateway.bridge.schemas import ENDPOINT_ENV, TOKEN_ENV
    from gateway.core.registry import ToolContext
    from gateway.core.results import Door
    from gateway.http import health, tasks
    from gateway.runtime import Gateway
    from gateway.testing import live_gateway, test_settings

    async def noop(_ctx: ToolContext, _args: Empty) -> dict[str, bool]:
        return {"ok": True}

    async def bare(request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"status": "succeeded", "request_id": body.get("request_id")})

    with tempfile.TemporaryDirectory() as tmp:

        def add_noop(gw: Gateway) -> None:
            gw.registry.tool(
                "bench.noop", title="noop", description="noop", input_model=Empty, scopes=["bench"]
            )(noop)

        async with live_gateway(
            test_settings(Path(tmp) / "data"),
            setup=add_noop,
            extensions=[health.routes, tasks.routes, install],
            extra_routes=[Route("/bare", bare, methods=["POST"])],
        ) as live:
            gw, base, http = live.gateway, live.base_url, live.http
            created = await http.post(
                "/v1/tasks",
                json={
                    "actor": {"id": "bench", "role": "admin"},
                    "org_id": "bench",
                    "sandbox": {"id": "sb", "app_origin": "http://127.0.0.1:9"},
                    "scopes": ["bench"],
                },
                headers=live.control,
            )
            task = created.json()
            identity = await gw.tasks.authenticate(task["tokens"]["agent"], _agent())
            env = {
                **os.environ,
                ENDPOINT_ENV: f"{base}/v1/parent-tools",
                TOKEN_ENV: task["tokens"]["bridge"],
            }
            client = BridgeClient.from_envelope(task["parent_tool_bridge"], env)
            headers = {"authorization": f"Bearer {task['tokens']['bridge']}"}

            samples: dict[str, list[float]] = {
                k: [] for k in ("pipe", "bare", "artifact", "host", "client")
            }
            transcript = b"x" * 1400
            for i in range(rounds):
                envelope = client.request("bench.noop", {}, request_id=f"ptr_b{i}").wire()
                t0 = time.perf_counter()
                await gw.pipeline.call(identity, "bench.noop", {}, door=Door.INTERNAL)
                samples["pipe"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await http.post("/bare", json=envelope)
                samples["bare"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await gw.store.put_artifact(
                    identity, transcript, name="bench.json", media_type="application/json"
                )
                samples["artifact"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                answer = await http.post("/v1/parent-tools", json=envelope, headers=headers)
                samples["host"].append(time.perf_counter() - t0)
                assert answer.json()["status"] == "succeeded", answer.text
                t0 = time.perf_counter()
                result = await client.call("bench.noop", {})
                samples["client"].append(time.perf_counter() - t0)
                assert result.ok, result.wire()

            relay = BridgeClient.from_envelope(as_host_command(client.envelope), env)
            samples["command"] = []
            for _ in range(command_rounds):
                t0 = time.perf_counter()
                result = await relay.call("bench.noop", {})
                samples["command"].append(time.perf_counter() - t0)
                assert result.ok, result.wire()

    pipe = summary(samples["pipe"])["p50"]
    bare_p50 = summary(samples["bare"])["p50"]
    floor = pipe + bare_p50 + summary(samples["artifact"])["p50"]
    host_p50 = summary(samples["host"])["p50"]
    rows = [
        _row("pipeline in-process (floor 1)", samples["pipe"]),
        _row("bare http round trip (floor 2)", samples["bare"]),
        _row("transcript artifact write (floor 3)", samples["artifact"]),
        _row("host dispatcher POST /v1/parent-tools", samples["host"], floor),
        _row("client, host_endpoint (new connection)", samples["client"], floor),
        _row("client, host_command (relay process)", samples["command"], floor),
    ]
    notes = {
        "goal": f"host dispatcher p50 <= {GOAL}x (pipeline + bare http + artifact write p50)",
        "floor p50 ms": floor * MS,
        "host dispatcher ratio": host_p50 / floor,
        "met": host_p50 / floor <= GOAL,
    }
    return rows, notes


def _agent() -> Any:
    from gateway.core.tokens import Purpose

    return Purpose.AGENT


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--command-rounds", type=int, default=15)
    args = parser.parse_args()
    rows, notes = asyncio.run(measure(args.rounds, args.command_rounds))
    path = write("bridge", rows, notes)
    print(
        f"host dispatcher: {notes['host dispatcher ratio']:.2f}x its floor "
        f"(goal <= {GOAL}x: {'met' if notes['met'] else 'NOT met'}); written to {path}"
    )


if __name__ == "__main__":
    main()
