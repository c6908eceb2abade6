"""`gateway demo`: the first workflow end to end, printed as a table.

It It starts a gateway and the dashboard on free loopback ports (data in a temporary
directory unless `--data-dir` is given), where each assistant task gets a sandbox of its
own (the app at the repository's current commit; or the shared sandbox instance where the
gateway cannot provision one, or with `--shared-sandbox`), opens a headless Chromium tab
signed in as the demo admin, opens the assistant panel, runs the six operations through
the MCP client with the task's agent token, prints one row per operation and the task's
sandbox manifest, saves a screenshot of the final report, and exits non-zero if any
operation missed its observable result.
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
    demo.add_argument(
        "--shared-sandbox",
        action="store_true",
        help="one shared sandbox instance instead of a sandbox per task",
    )
    demo.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from gateway.browser.chromium import BrowserNotFound

    try:
        shared = bool(getattr(args, "shared_sandbox", False))
        if args.data_dir is not None:
            return asyncio.run(run(args.data_dir, args.screenshot, args.door, shared=shared))
        with tempfile.TemporaryDirectory(prefix="gateway-demo-") as tmp:
            return asyncio.run(run(Path(tmp), args.screenshot, args.door, shared=shared))
    except BrowserNotFound as exc:
        print(f"demo: {exc} (make setup installs one)", file=sys.stderr)
        return 2


async def run(
    data_dir: Path, screenshot: Path, door_name: str = "mcp", *, shared: bool = False
) -> int:
    from playwright.async_api import async_playwright

    from examples.synthetic_app.serve import provision_for, running_stack, sandboxes_unusable
    from examples.synthetic_app.workflow import (
        mcp_door,
        open_assistant,
        run_workflow,
        sign_in,
        table,
        webmcp_door,
    )
    from gateway.browser.chromium import find_chromium, launch_args
    from gateway.settings import Settings

    settings = Settings(data_dir=data_dir, example=True)
    unusable = "--shared-sandbox" if shared else sandboxes_unusable(settings)
    provision = provision_for(settings, step_s=0.15) if unusable is None else None
    async with running_stack(settings, step_s=0.15, provision=provision) as stack:
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
                sandbox = await sandbox_lines(stack, DEMO_ADMIN, unusable)
            finally:
                await browser.close()
    print(table(steps))
    print("\n".join(sandbox))
    ok = len(steps) == 6 and all(s.ok for s in steps)
    print(f"demo: screenshot of the final report in {screenshot}")
    print("demo: every operation reached its observable result" if ok else "demo: FAILED")
    return 0 if ok else 1


async def sandbox_lines(stack: Any, user: str, unusable: str | None) -> list[str]:
    """The task's sandbox, as its manifest (`sandbox-manifest/v1`) records it."""
    from gateway.sandbox.service import Sandboxes

    control = stack.dashboard.control
    task = control.latest_for_user(user) if control is not None else None
    found = stack.gateway.services.find(Sandboxes)
    described = await found.probe(task.task_id) if found is not None and task else None
    if not described or not described.get("manifest"):
        return [f"sandbox: the shared instance on {stack.sandbox_url} ({unusable})"]
    m = described["manifest"]
    limits = m["limits"]
    bound = m["bound_to"]
    return [
        f"sandbox: {m['sandbox_id']} ({m['provider']}), {described['state']}, "
        f"started {m['started_at']}",
        f"  app:      {m['repository']} at {m['commit'][:12]}, tree {m['tree']['tree'][:12]}, "
        f"{m['tree']['files']} files, sha256 {m['tree']['sha256'][:16]}…",
        f"  command:  {' '.join(m['command'])}",
        f"  origin:   {m['origin']} (no network; its unix socket, through the task's guard)",
        f"  bound to: {bound['task_id']}, owner {bound['owner']} of {bound['org_id']}",
        f"  limits:   {limits['memory_mb']} MiB, {limits['processes']} processes, "
        f"{limits['cpu_s']} s CPU, files {limits['file_size_mb']} MiB "
        f"({', '.join(m['enforced_by'])})",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="gateway demo")
    add_command(parser.add_subparsers())
    sys.exit(main(parser.parse_args(["demo", *sys.argv[1:]])))
