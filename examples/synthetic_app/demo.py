"""`gateway demo`: the first workflow end to end, printed as a table.

It starts a gateway, the dashboard and its sandbox instance on free loopback ports (data in
a temporary directory unless `--data-dir` is given), opens a headless Chromium tab signed
in as the demo admin, opens the assistant panel, runs the six operations through the MCP
client with the task's agent token, prints one row per operation, saves a screenshot of
the final report, and exits non-zero if any operation missed its observable result.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from examples.synthetic_app.directory import DEMO_ADMIN


def add_command(sub: Any) -> None:
    demo = sub.add_parser("demo", help="run the first workflow end to end and print the results")
    demo.add_argument(
        "--screenshot",
        type=Path,
        default=Path("gateway-demo-report.png"),
        help="where to save the screenshot of the final report",
    )
    demo.add_argument("--data-dir", type=Path, default=None, help="keep the demo's data here")
    demo.add_argument(
        "--door",
        choices=["mcp", "webmcp"],
        default="mcp",
        help="how the agent calls the tools (default: the MCP client)",
    )
    demo.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from gateway.chromium import BrowserNotFound

    try:
        if args.data_dir is not None:
            return asyncio.run(run(args.data_dir, args.screenshot, args.door))
        with tempfile.TemporaryDirectory(prefix="gateway-demo-") as tmp:
            return asyncio.run(run(Path(tmp), args.screenshot, args.door))
    except BrowserNotFound as exc:
        print(f"demo: {exc} (make setup installs one)", file=sys.stderr)
        return 2


async def run(data_dir: Path, screenshot: Path, door_name: str = "mcp") -> int:
    from playwright.async_api import async_playwright

    from examples.synthetic_app.serve import running_stack
    from examples.synthetic_app.workflow import (
        mcp_door,
        open_assistant,
        run_workflow,
        sign_in,
        table,
        webmcp_door,
    )
    from gateway.chromium import find_chromium, launch_args
    from gateway.settings import Settings

    settings = Settings(data_dir=data_dir, example=True)
    async with running_stack(settings, step_s=0.15) as stack:
        print(f"demo: gateway {stack.gateway_url}, dashboard {stack.dashboard_url}", flush=True)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=find_chromium(settings.browser_executable),
                args=launch_args(webmcp=True),
            )
            try:
                page = await browser.new_page(viewport={"width": 1360, "height": 860})
                await sign_in(page, stack.dashboard_url, DEMO_ADMIN)
                agent_token = await open_assistant(page, stack, DEMO_ADMIN)
                print(f"demo: signed in as {DEMO_ADMIN}, assistant connected", flush=True)
                if door_name == "webmcp":
                    steps = await run_workflow(stack, page, webmcp_door(page), user=DEMO_ADMIN)
                else:
                    async with mcp_door(stack.gateway_url, agent_token) as door:
                        steps = await run_workflow(stack, page, door, user=DEMO_ADMIN)
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(screenshot))
            finally:
                await browser.close()
    print(table(steps))
    ok = len(steps) == 6 and all(s.ok for s in steps)
    print(f"demo: screenshot of the final report in {screenshot}")
    print("demo: every operation reached its observable result" if ok else "demo: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="gateway demo")
    add_command(parser.add_subparsers())
    sys.exit(main(parser.parse_args(["demo", *sys.argv[1:]])))
