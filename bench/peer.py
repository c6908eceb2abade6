"""The gateway's browser door side by side with Microsoft's Playwright MCP server.

Both sides are driven by the official MCP Python SDK client and drive the same Chromium
binary (`find_chromium()`) on the same small app page, served on loopback by its own process:

- the peer: `@playwright/mcp` (pinned in bench/peer/package.json, installed there with npm
  on first run), spawned per session over stdio with `--headless --isolated`; one Chromium
  per session, as the peer runs it;
- the gateway: served on loopback with its default extensions; a session is a task with the
  `browser` scope (POST /v1/tasks), the agent token, and the SDK client over streamable HTTP
  to /v1/mcp calling browser.navigate / browser.snapshot / browser.click. Its Chromium is
  already running (that is what a gateway is for); the task gets its own context.

Rows, at 1, 8 and 32 concurrent sessions, p50/p99 over at least 60 samples each: session
start (peer: spawn + initialize + first navigate; gateway: POST /v1/tasks + initialize +
first navigate, without and with the warm stock of contexts), navigate, snapshot,
navigate + snapshot, click. The sides take turns
round by round (the order rotates), so the machine's drift hits them alike. The goal is to
be ahead on every row (ratio gateway/peer below 1, p50 and p99).

`--configs 1x1,1x2,1x4,2x2` compares browser pool shapes instead (processes x actions per
process, `GATEWAY_BROWSER_PROCESSES` x `GATEWAY_BROWSER_ACTIONS_PER_PROCESS`, and a third
figure for `GATEWAY_BROWSER_READS_PER_PROCESS`, as in 1x4x0,1x4x8; `@DIR` after a shape
runs the gateway's code of another source tree, 1x4x8,1x4x8@../main: before and after a
change in the same rounds): one warm
gateway per shape, the work rows only, every shape and the peer taking turns in the same
rounds, each figure a ratio against the peer of that run, with the 1-minute load average at
the rounds' starts next to it.

Run: `python -m bench.peer` (`--quick` for fewer rounds; on a machine busy with other work,
`--samples 24 --quiet-s 2` keeps all three columns within a quarter of an hour: the wait for
an idle CPU before each round gives up after that many seconds, and it never comes there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.browser import app_process
from bench.report import cpu_quiet, summary, write
from gateway.browser.chromium import find_chromium, launch_args
from gateway.browser.jail import browser_user
from gateway.core.registry import exposed_name

PEER_DIR = Path(__file__).parent / "peer"
PEER_CLI = PEER_DIR / "node_modules" / "@playwright" / "mcp" / "cli.js"
CONTROL_KEY = "bench-control-key-0123456789abcdef"
COLUMNS = (1, 8, 32)  # concurrent sessions per side
MIN_SAMPLES = 60
MS = 1e3
SAVE_REF = re.compile(r'button \\?"Save\\?" \[ref=([^\]\\]+)\]')
WARM_GAUGE = re.compile(r"^gateway_browser_warm_contexts ([0-9.]+)$", re.MULTILINE)
Call = Callable[[str, dict[str, Any]], Awaitable[str]]
Samples = dict[str, list[float]]


# -- the peer's installation -----------------------------------------------------------------


def ensure_peer() -> str:
    """Install the pinned peer with npm when missing; return its version."""
    if not PEER_CLI.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed to install the peer (@playwright/mcp)")
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=PEER_DIR, check=True
        )
    meta = json.loads((PEER_CLI.parent / "package.json").read_text())
    version: str = meta["version"]
    return version


# -- one session, either side ----------------------------------------------------------------


@dataclass
class Session:
    call: Call
    close: Callable[[], Awaitable[None]]


def _text(result: Any) -> str:
    """Everything a tool result says, as text (the peer answers in text blocks, the gateway
    in structured content)."""
    if result.is_error:
        raise RuntimeError(f"tool failed: {str(result.content)[:300]}")
    parts = [getattr(block, "text", "") for block in result.content]
    if result.structured_content:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


async def _hold(
    factory: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """Enter an async context in a task of its own, so it can be left from anywhere."""
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def keep() -> None:
        try:
            async with factory() as value:
                ready.set_result(value)
                await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                raise

    task = asyncio.create_task(keep())

    async def close() -> None:
        done.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)

    return await ready, close


class Peer:
    """Sessions of the peer: one `npx @playwright/mcp` process (and Chromium) each.

    `sandboxed`: each session runs as the task browser's own unprivileged user, so its
    Chromium keeps its own sandbox, as the gateway's jailed Chromium does (as root, Chromium
    runs only with `--no-sandbox`, whose renderers do the same page work faster)."""

    name = "peer"

    def __init__(self, work: Path, *, sandboxed: bool = False) -> None:
        self.work = work
        self.user = browser_user(None) if sandboxed and os.geteuid() == 0 else None
        config = {
            "browser": {
                "browserName": "chromium",
                "isolated": True,
                "launchOptions": {
                    "executablePath": find_chromium(),
                    "headless": True,
                    "args": launch_args(sandboxed=self.user is not None),
                },
            }
        }
        self.config = work / "peer-config.json"
        self.config.write_text(json.dumps(config))
        self.config.chmod(0o644)
        if self.user is not None:
            work.chmod(0o755)
        self.count = 0

    async def settled(self) -> None:
        """Nothing of the peer runs between rounds: its sessions' processes are gone."""

    async def open(self, url: str) -> Session:
        from mcp.client.stdio import StdioServerParameters

        from mcp import Client

        self.count += 1
        cwd = self.work / f"peer-{self.count}"  # its snapshot files land in its cwd
        cwd.mkdir()
        args = [str(PEER_CLI), "--headless", "--isolated", "--executable-path", find_chromium()]
        if os.geteuid() == 0 and self.user is None:
            args.append("--no-sandbox")
        args += ["--config", str(self.config), "--output-dir", str(cwd)]
        params = StdioServerParameters(command="node", args=args, cwd=cwd)
        if self.user is not None:
            uid, gid = self.user
            os.chown(cwd, uid, gid)
            params = StdioServerParameters(
                command="setpriv",
                args=[
                    f"--reuid={uid}",
                    f"--regid={gid}",
                    "--clear-groups",
                    "node",
                    *args,
                ],
                cwd=cwd,
                env={
                    "HOME": str(cwd),
                    "TMPDIR": str(cwd),
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                },
            )
        client, close = await _hold(lambda: Client(params, read_timeout_seconds=120))

        async def call(tool: str, data: dict[str, Any]) -> str:
            peer_tool = {"browser.navigate": "browser_navigate", "browser.click": "browser_click"}
            if tool == "browser.click":
                data = {"target": data["ref"], "element": "Save button"}
            return _text(await client.call_tool(peer_tool.get(tool, "browser_snapshot"), data))

        await call("browser.navigate", {"url": url})
        return Session(call, close)


class Ours:
    """Sessions of the gateway: a task with the browser scope and the MCP door."""

    name = "gateway"

    def __init__(self, base_url: str, app: str, warm: int) -> None:
        self.base_url = base_url
        self.app = app
        self.warm = warm
        self.control = httpx.AsyncClient(
            base_url=base_url, headers={"authorization": f"Bearer {CONTROL_KEY}"}, timeout=60
        )

    async def open(self, url: str) -> Session:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        from mcp import Client

        body = {
            "actor": {"id": "bench", "role": "member"},
            "org_id": "org_bench",
            "sandbox": {"id": "sb_bench", "app_origin": self.app},
            "scopes": ["browser"],
        }
        created = await self.control.post("/v1/tasks", json=body)
        created.raise_for_status()
        task = created.json()
        task_id, token = task["task_id"], task["tokens"]["agent"]

        @contextlib.asynccontextmanager
        async def door() -> AsyncIterator[Any]:
            headers = {"authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http,
                Client(
                    streamable_http_client(f"{self.base_url}/v1/mcp", http_client=http)
                ) as client,
            ):
                yield client

        client, leave = await _hold(door)

        async def call(tool: str, data: dict[str, Any]) -> str:
            # Sessions at once beyond the browser's action slots are turned away as
            # `overloaded`: made again after the time named, as the contract asks of a client.
            while True:
                result = await client.call_tool(exposed_name(tool), data)
                error = (result.structured_content or {}).get("error") or {}
                if error.get("code") != "overloaded":
                    return _text(result)
                await asyncio.sleep(error["details"]["retry_after_s"])

        async def close() -> None:
            await leave()
            await self.control.delete(f"/v1/tasks/{task_id}")

        await call("browser.navigate", {"url": url})
        return Session(call, close)

    async def settled(self, timeout_s: float = 30.0) -> None:
        """Wait until the gateway's warm stock is full again, so its refill (background
        work, on the same 2 cores) does not land inside either side's measured round."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            metrics = (await self.control.get("/metrics")).text
            stocked = WARM_GAUGE.search(metrics)
            if stocked is None or float(stocked[1]) >= self.warm:
                return
            await asyncio.sleep(0.1)

    async def aclose(self) -> None:
        await self.control.aclose()


# -- measuring -------------------------------------------------------------------------------


async def timed(fn: Callable[..., Awaitable[Any]], *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = await fn(*args)
    return time.perf_counter() - t0, value


QUIET_S = 10.0  # the longest wait for an idle CPU before a round (`--quiet-s`)
# The peer's Chromium with its own sandbox, as the task browser's user (`--peer-sandboxed`).
PEER_SANDBOXED = False


async def settle(sides: dict[str, Any]) -> None:
    """Every side idle, its background work done, before a round is measured."""
    for side in sides.values():
        await side.settled()
    await cpu_quiet(timeout_s=QUIET_S)


async def start_round(side: Any, url: str, sessions: int) -> list[float]:
    """Open `sessions` sessions at once, then close them; their start times."""
    opened = await asyncio.gather(*(timed(side.open, url) for _ in range(sessions)))
    await asyncio.gather(*(session.close() for _, session in opened))
    return [seconds for seconds, _ in opened]


async def starts(sides: dict[str, Any], url: str, sessions: int, rounds: int) -> Samples:
    """Session starts of every side, round by round in a rotating order, so the machine's
    drift hits all sides alike."""
    samples: Samples = {name: [] for name in sides}
    names = list(sides)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            await settle(sides)
            samples[name].extend(await start_round(sides[name], url, sessions))
    return samples


async def work_round(sessions: list[Session], url: str, samples: Samples) -> None:
    """Every session does navigate, snapshot, click at the same time."""

    async def one(session: Session) -> None:
        nav, _ = await timed(session.call, "browser.navigate", {"url": url})
        snap, text = await timed(session.call, "browser.snapshot", {})
        match = SAVE_REF.search(text)
        if match is None:
            raise RuntimeError(f"no Save button in the snapshot: {text[:300]}")
        click, _ = await timed(session.call, "browser.click", {"ref": match[1]})
        samples["navigate"].append(nav)
        samples["snapshot"].append(snap)
        samples["navigate + snapshot"].append(nav + snap)
        samples["click"].append(click)

    await asyncio.gather(*(one(s) for s in sessions))


async def work(
    sides: dict[str, Any], url: str, sessions: int, rounds: int, loads: Samples | None = None
) -> dict[str, Samples]:
    """`sessions` open sessions per side; rounds alternate between the sides. `loads` gets
    each side's 1-minute load average at the start of its rounds."""
    opened = {
        name: await asyncio.gather(*(side.open(url) for _ in range(sessions)))
        for name, side in sides.items()
    }
    samples: dict[str, Samples] = {
        name: {"navigate": [], "snapshot": [], "navigate + snapshot": [], "click": []}
        for name in sides
    }
    names = list(sides)
    try:
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                await settle(sides)
                if loads is not None:
                    loads.setdefault(name, []).append(os.getloadavg()[0])
                await work_round(opened[name], url, samples[name])
    finally:
        for group in opened.values():
            await asyncio.gather(*(s.close() for s in group))
    return samples


def row(measure: str, sessions: int, peer: list[float], ours: list[float]) -> dict[str, Any]:
    p, o = summary(peer), summary(ours)
    ratio = o["p50"] / p["p50"]
    return {
        "measure": measure,
        "sessions": sessions,
        "n": min(len(peer), len(ours)),
        "peer p50 ms": p["p50"] * MS,
        "peer p99 ms": p["p99"] * MS,
        "gateway p50 ms": o["p50"] * MS,
        "gateway p99 ms": o["p99"] * MS,
        "ratio p50": ratio,
        "ratio p99": o["p99"] / p["p99"],
        "ahead": ratio < 1 and o["p99"] < p["p99"],
    }


@contextlib.asynccontextmanager
async def gateway(
    data: Path, warm: int, settings: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """`gateway serve` in its own process, as it is deployed (the peer runs in its own too);
    `settings`: more of its environment (GATEWAY_* names), and `cwd`, the source tree it
    runs from (this one's by default)."""
    from gateway.serving import free_port

    port = free_port()
    settings = dict(settings or {})
    cwd = settings.pop("cwd", None)  # another source tree of the gateway (`pool_shape`)
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(data),
        "GATEWAY_CONTROL_KEY": CONTROL_KEY,
        "GATEWAY_BROWSER_WARM_CONTEXTS": str(warm),
        "GATEWAY_MAX_CONTEXTS": str(max(COLUMNS) + 16),
        **settings,
    }
    log = (data.parent / f"{data.name}.log").open("wb")  # its access log, off the terminal
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway.cli", "serve", "--no-example", "--port", str(port)),
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        # A session of its own, as a service has and as the SDK's stdio client gives each
        # peer process: Linux schedules sessions as groups (autogroup), so a gateway left
        # in the bench's session would share one group's CPU with the bench's clients.
        start_new_session=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(base_url + "/healthz")).status_code < 500:
                        break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("the gateway did not start")
        yield base_url
    finally:
        proc.terminate()
        await proc.wait()
        log.close()


async def measure(
    quick: bool, samples: int = MIN_SAMPLES
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    version = ensure_peer()
    # Rounds per column, so that each row has at least 60 samples (a round at n sessions
    # gives n): starts at 1 session are the slowest part of the run.
    columns = (1, 8) if quick else COLUMNS
    start_rounds = {1: 3, 8: 1} if quick else {n: -(-samples // n) for n in columns}
    work_rounds = {1: 16, 8: 4} if quick else {n: -(-samples // n) for n in columns}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = Path(tmp)
        async with (
            app_process() as app,
            gateway(work_dir / "cold", warm=0) as cold_base,
            gateway(work_dir / "warm", warm=8) as warm_base,
        ):
            url = app + "/"
            peer = Peer(work_dir, sandboxed=PEER_SANDBOXED)
            cold, warm = Ours(cold_base, app, warm=0), Ours(warm_base, app, warm=8)
            # One start each first: node and Chromium in the OS cache (the peer's "warm"
            # start), the gateways' Chromium launched and their code paths warm.
            for side in (peer, cold, warm):
                await (await side.open(url)).close()
            sides = {"peer": peer, "cold": cold, "warm": warm}
            start = {n: await starts(sides, url, n, start_rounds[n]) for n in columns}
            both = {"peer": peer, "gateway": warm}
            done = {n: await work(both, url, n, work_rounds[n]) for n in columns}
            await cold.aclose()
            await warm.aclose()

    for n in columns:
        peer_start = start[n]["peer"]
        rows.append(
            row("session start, gateway without warm stock", n, peer_start, start[n]["cold"])
        )
        rows.append(row("session start, gateway with warm stock", n, peer_start, start[n]["warm"]))
        for op in ("navigate", "snapshot", "navigate + snapshot", "click"):
            rows.append(row(op, n, done[n]["peer"][op], done[n]["gateway"][op]))
    notes = {
        "peer": f"@playwright/mcp {version}, stdio, --headless --isolated, one process per session",
        "peer_chromium_sandbox": PEER_SANDBOXED,
        "gateway": "served on loopback, SDK client over streamable HTTP, agent token",
        "client": "official MCP Python SDK (mcp.Client) on both sides",
        "chromium": find_chromium(),
        "quoted peer figures (ms)": {
            "navigate": 91,
            "snapshot": 16,
            "click": 572,
            "warm session start": 378,
            "navigate + snapshot at 8 sessions p50": 823,
        },
        "goal": "gateway ahead of the peer on every row (p50 and p99)",
        "met": all(r["ahead"] for r in rows),
        "quick": quick,
        "samples per row at least": samples,
        "longest wait for an idle CPU before a round (s)": QUIET_S,
        "load average at end": list(os.getloadavg()),
    }
    return rows, notes


OPS = ("navigate", "snapshot", "navigate + snapshot", "click")


def pool_shape(config: str) -> dict[str, str]:
    """`2x4`: 2 Chromium processes with 4 actions each, as the gateway's settings; `1x4x0`:
    and 0 read slots (snapshots take action slots), `1x4x8` 8 of them. `1x4x8@DIR`: the
    gateway's code from the source tree DIR (another checkout), so that two versions of
    the code take turns in the same rounds."""
    config, _, tree = config.partition("@")
    parts = config.split("x")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise SystemExit(
            f"a pool shape is PROCESSESxACTIONS[xREADS], such as 1x2 or 1x4x8, not {config!r}"
        )
    shape = {
        "GATEWAY_BROWSER_PROCESSES": parts[0],
        "GATEWAY_BROWSER_ACTIONS_PER_PROCESS": parts[1],
    }
    if len(parts) == 3:
        shape["GATEWAY_BROWSER_READS_PER_PROCESS"] = parts[2]
    if tree:
        if not (Path(tree) / "gateway" / "cli.py").is_file():
            raise SystemExit(f"{tree!r} is not a source tree of the gateway")
        # `python -m` puts its working directory first on the path: `gateway` runs there.
        shape["cwd"] = str(Path(tree).resolve())
    return shape


async def measure_shapes(
    configs: list[str], quick: bool, samples: int = MIN_SAMPLES
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The work rows, one warm gateway per pool shape, all of them and the peer in turns."""
    version = ensure_peer()
    columns = (1, 8) if quick else COLUMNS
    work_rounds = {1: 16, 8: 4} if quick else {n: -(-samples // n) for n in columns}
    rows: list[dict[str, Any]] = []
    loads: dict[int, Samples] = {n: {} for n in columns}
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            app = await stack.enter_async_context(app_process())
            url = app + "/"
            sides: dict[str, Any] = {"peer": Peer(work_dir, sandboxed=PEER_SANDBOXED)}
            for config in configs:
                data = work_dir / re.sub(r"[^A-Za-z0-9]+", "-", config)
                base = await stack.enter_async_context(
                    gateway(data, warm=8, settings=pool_shape(config))
                )
                sides[config] = Ours(base, app, warm=8)
                stack.push_async_callback(sides[config].aclose)
            for side in sides.values():
                await (await side.open(url)).close()
            done = {n: await work(sides, url, n, work_rounds[n], loads[n]) for n in columns}
    for n in columns:
        for config in configs:
            for op in OPS:
                line = row(op, n, done[n]["peer"][op], done[n][config][op])
                line["pool (processes x actions)"] = config
                line["load 1m, peer rounds"] = sum(loads[n]["peer"]) / len(loads[n]["peer"])
                line["load 1m, gateway rounds"] = sum(loads[n][config]) / len(loads[n][config])
                rows.append(line)
    notes = {
        "peer": f"@playwright/mcp {version}, stdio, --headless --isolated, one process per session",
        "peer_chromium_sandbox": PEER_SANDBOXED,
        "gateway": "one per pool shape, warm stock 8, SDK client over streamable HTTP",
        "shapes": configs,
        "goal": "gateway ahead of the peer on every row (p50 and p99)",
        "met": all(r["ahead"] for r in rows),
        "quick": quick,
        "longest wait for an idle CPU before a round (s)": QUIET_S,
        "load average at end": list(os.getloadavg()),
    }
    return rows, notes


def main() -> int:
    global QUIET_S, PEER_SANDBOXED
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--samples", type=int, default=MIN_SAMPLES, help="samples per row")
    parser.add_argument("--quiet-s", type=float, default=QUIET_S, help="idle-CPU wait, at most")
    parser.add_argument(
        "--configs",
        default="",
        help="pool shapes to compare, PROCESSESxACTIONS[xREADS][@SOURCE_TREE] "
        "comma-separated (1x1,1x2,2x2; 1x4x8,1x4x8@../other-checkout)",
    )
    parser.add_argument(
        "--peer-sandboxed",
        action="store_true",
        help="run the peer's sessions as the task browser's user, Chromium's sandbox on",
    )
    args = parser.parse_args()
    QUIET_S = args.quiet_s
    PEER_SANDBOXED = args.peer_sandboxed
    if args.configs:
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        rows, notes = asyncio.run(measure_shapes(configs, args.quick, args.samples))
        path = write("peer-shapes", rows, notes)
    else:
        rows, notes = asyncio.run(measure(args.quick, args.samples))
        path = write("peer", rows, notes)
    for r in rows:
        shape = r.get("pool (processes x actions)", "")
        print(
            f"{shape:>4} {r['measure']:<42} @{r['sessions']:<2} "
            f"p50 {r['ratio p50']:.2f}x p99 {r['ratio p99']:.2f}x"
            + (f" load {r['load 1m, gateway rounds']:.1f}" if shape else "")
        )
    behind = [f"{r['measure']} @{r['sessions']}" for r in rows if not r["ahead"]]
    print(f"ahead on every row: {notes['met']}")
    if behind:
        print(f"not ahead: {', '.join(behind)}")
    print(f"written to {path}")
    return 0 if notes["met"] else 2


if __name__ == "__main__":
    sys.exit(main())
