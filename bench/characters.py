"""What a model has to read to do the same steps: the gateway against Playwright MCP.

The same steps on the same pages, each side making the fewest calls it needs, both driven
by the official MCP Python SDK client and the same Chromium binary:

1. open a list page with a table of agents (60 rows, and a large one of 600),
2. open one row's link,
3. fill the Notes field of the page it opens.

- the gateway: browser_navigate (its answer carries the page's snapshot), browser_click on
  the row's link (after a navigation its answer carries the new page), browser_fill (its
  answer is what changed): three calls;
- the peer (`@playwright/mcp`, pinned in bench/peer): browser_navigate, browser_snapshot
  whenever an answer does not carry the ref the next step needs, browser_click,
  browser_type.

Counted: the characters of the text blocks of every answer, which is what a client hands
the model. Every step must succeed on both sides. Goal: the gateway's total at most 0.6x
the peer's on each page.

Run: `python -m bench.characters`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from bench.peer import PEER_CLI, ensure_peer
from bench.report import write
from gateway.browser.chromium import find_chromium
from gateway.serving import serving
from gateway.testing import live_gateway, test_settings
from mcp import Client

GOAL = 0.6
ROW = 7
PAGES = {"list of 60": 60, "list of 600": 600}

Call = Callable[[str, dict[str, Any]], Awaitable[str]]


def agents_app() -> Starlette:
    async def listing(request: Request) -> HTMLResponse:
        rows = int(request.query_params.get("rows", "60"))
        body = "".join(
            f"<tr><td><a href='/agents/{i}'>Agent {i}</a></td><td>suite {i % 7}</td>"
            f"<td>{'passed' if i % 3 else 'failed'}</td><td>{i * 13 % 97} runs</td></tr>"
            for i in range(rows)
        )
        return HTMLResponse(
            "<!doctype html><title>Agents</title><h1>Agents</h1>"
            "<nav><a href='/'>Home</a> <a href='/agents'>Agents</a></nav>"
            "<table><thead><tr><th>Agent</th><th>Suite</th><th>State</th><th>Runs</th></tr>"
            f"</thead><tbody>{body}</tbody></table>"
        )

    async def agent(request: Request) -> HTMLResponse:
        i = request.path_params["i"]
        return HTMLResponse(
            f"<!doctype html><title>Agent {i}</title><h1>Agent {i}</h1>"
            "<nav><a href='/agents'>Agents</a></nav>"
            "<form><label>Notes <input name='notes'></label><button type='button'>Save"
            "</button></form>"
        )

    return Starlette(routes=[Route("/agents", listing), Route("/agents/{i}", agent)])


def _text(result: Any) -> str:
    if result.is_error:
        raise RuntimeError(f"a step failed: {str(result.content)[:300]}")
    return "\n".join(getattr(block, "text", "") for block in result.content)


def _ref(text: str, role: str, name: str) -> str | None:
    found = re.search(rf'{role} "{re.escape(name)}"[^\n]*?\[ref=([^\]]+)\]', text)
    return found[1] if found else None


async def gateway_steps(call: Call, url: str) -> list[tuple[str, int]]:
    steps = []
    opened = await call("browser_navigate", {"url": url})
    steps.append(("browser_navigate", len(opened)))
    link = _ref(opened, "link", f"Agent {ROW}")
    assert link is not None, opened[:2000]
    clicked = await call("browser_click", {"ref": link})
    steps.append(("browser_click", len(clicked)))
    field = _ref(clicked, "textbox", "Notes")
    assert field is not None, clicked[:2000]
    filled = await call("browser_fill", {"ref": field, "value": "checked"})
    steps.append(("browser_fill", len(filled)))
    return steps


async def peer_steps(call: Call, url: str) -> list[tuple[str, int]]:
    steps = []

    async def with_ref(answer: str, role: str, name: str) -> str:
        ref = _ref(answer, role, name)
        if ref is None:
            snapshot = await call("browser_snapshot", {})
            steps.append(("browser_snapshot", len(snapshot)))
            ref = _ref(snapshot, role, name)
        assert ref is not None, answer[:2000]
        return ref

    opened = await call("browser_navigate", {"url": url})
    steps.append(("browser_navigate", len(opened)))
    link = await with_ref(opened, "link", f"Agent {ROW}")
    clicked = await call("browser_click", {"target": link, "element": f"Agent {ROW} link"})
    steps.append(("browser_click", len(clicked)))
    field = await with_ref(clicked, "textbox", "Notes")
    typed = await call(
        "browser_type", {"target": field, "element": "Notes field", "text": "checked"}
    )
    steps.append(("browser_type", len(typed)))
    return steps


async def measure() -> list[dict[str, Any]]:
    ensure_peer()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            serving(agents_app()) as app,
            live_gateway(
                test_settings(Path(tmp) / "gw", browser_launch_at_start=True),
                check_leaks=False,
            ) as live,
        ):
            for page, size in PAGES.items():
                url = f"{app}/agents?rows={size}"
                task = await live.create_task(scopes=["browser"], app_origin=app)
                headers = {"authorization": f"Bearer {task['tokens']['agent']}"}
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http,
                    Client(
                        streamable_http_client(f"{live.base_url}/v1/mcp", http_client=http)
                    ) as c,
                ):

                    async def ours(tool: str, data: dict[str, Any], c: Any = c) -> str:
                        return _text(await c.call_tool(tool, data))

                    gateway = await gateway_steps(ours, url)
                args = [str(PEER_CLI), "--headless", "--isolated"]
                args += ["--executable-path", find_chromium(), "--output-dir", tmp]
                if os.geteuid() == 0:
                    args.append("--no-sandbox")
                params = StdioServerParameters(command="node", args=args, cwd=tmp)
                async with Client(params, read_timeout_seconds=120) as p:

                    async def theirs(tool: str, data: dict[str, Any], p: Any = p) -> str:
                        return _text(await p.call_tool(tool, data))

                    peer = await peer_steps(theirs, url)
                ours_total = sum(n for _, n in gateway)
                peer_total = sum(n for _, n in peer)
                rows.append(
                    {
                        "page": page,
                        "gateway calls": [t for t, _ in gateway],
                        "gateway characters": ours_total,
                        "gateway per call": dict(gateway),
                        "peer calls": [t for t, _ in peer],
                        "peer characters": peer_total,
                        "ratio": round(ours_total / peer_total, 3),
                        "goal": GOAL,
                        "met": ours_total <= GOAL * peer_total,
                    }
                )
    return rows


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None).parse_args()
    rows = asyncio.run(measure())
    for row in rows:
        print(
            f"{row['page']:>12}: gateway {row['gateway characters']:>7} characters in "
            f"{len(row['gateway calls'])} calls, Playwright MCP {row['peer characters']:>7} in "
            f"{len(row['peer calls'])} calls: {row['ratio']}x (goal {GOAL}x: "
            f"{'met' if row['met'] else 'NOT met'})"
        )
    write(
        "characters",
        [{k: v for k, v in row.items() if k != "gateway per call"} for row in rows],
        {"goal": f"gateway characters <= {GOAL}x the peer's"},
    )
    return 0 if all(row["met"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
