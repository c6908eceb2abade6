"""Task browsers from a remote Playwright server (`GATEWAY_BROWSER_WS_ENDPOINT`): one whose
browser runs in the gateway's network jail serves tasks with the guard intact; one outside
it is refused before any task uses it, even with every guard flag (its pages' WebRTC
sends UDP wherever they like), and so is one that goes around the proxy.

Several servers (`GATEWAY_BROWSER_WS_ENDPOINTS`): contexts spread over them, a server that
dies costs only its own tasks' browsers, and one outside the jail never serves while the
others do."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gateway.browser import BrowserPool, BrowserProcesses
from gateway.browser.chromium import find_chromium, launch_args
from gateway.browser.jail import BrowserJail
from gateway.browser.processes import GUARD_ARGS, TASK_BROWSER_DISABLED_FEATURES
from gateway.core.identity import TaskIdentity
from gateway.core.results import ToolStatus
from gateway.parts import browser_processes_config
from tests.browser.conftest import BrowserGateway, Sites, browser_gateway, browser_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# What the gateway launches its own Chromium with, for a server in its jail.
JAILED_ARGS = launch_args(
    extra=GUARD_ARGS, disable_features=TASK_BROWSER_DISABLED_FEATURES, sandboxed=True
)


@dataclass
class Server:
    """`playwright launch-server` in its own process, as an operator runs it."""

    endpoint: str
    process: asyncio.subprocess.Process  # the leader of its own process group

    def kill(self) -> None:
        """The server and its driver at once (their browser follows when its pipe to the
        driver closes)."""
        os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()


async def launch_server(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    jail: BrowserJail | None = None,
) -> Server:
    """A server whose browser, with `jail`, runs in that network jail, as the gateway's own
    do."""
    config = tmp_path / f"server-{os.urandom(4).hex()}.json"
    options: dict[str, object] = {"executablePath": find_chromium(), "headless": True}
    if jail is not None:
        options.update(executablePath=jail.launcher, chromiumSandbox=True)
        env = {**(env or {}), **jail.environment(find_chromium())}
    config.write_text(json.dumps({**options, "args": args}))
    # A session of its own: `python -m playwright` runs the driver as its child, and the
    # driver, which owns the browser, must get the signal too.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "playwright", "launch-server", "--browser", "chromium", "--config", str(config)),
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    server = Server("", proc)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
    except BaseException:
        await server.stop()
        raise
    server.endpoint = line.decode().strip()
    if not server.endpoint.startswith("ws://"):
        await server.stop()
        raise AssertionError(f"launch-server said {server.endpoint!r}")
    return server


@contextlib.asynccontextmanager
async def playwright_server(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    jail: BrowserJail | None = None,
) -> AsyncIterator[Server]:
    server = await launch_server(tmp_path, args, env, jail=jail)
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def playwright_servers(
    tmp_path: Path, *launches: tuple[list[str], BrowserJail | None]
) -> AsyncIterator[list[Server]]:
    """Several servers, each `(args, jail)`, started side by side."""
    started = await asyncio.gather(
        *(launch_server(tmp_path, args, jail=jail) for args, jail in launches),
        return_exceptions=True,
    )
    servers = [s for s in started if isinstance(s, Server)]
    try:
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        yield servers
    finally:
        await asyncio.gather(*(s.stop() for s in servers))


async def test_a_remote_browser_in_the_network_jail_serves_tasks(
    tmp_path: Path, sites: Sites
) -> None:
    jail = BrowserJail()
    await jail.start()
    settings = browser_settings(tmp_path / "gw", browser_ws_endpoint="ws://set-below")
    try:
        async with playwright_server(tmp_path, JAILED_ARGS, jail=jail) as server:
            settings.browser_ws_endpoint = server.endpoint
            processes = BrowserProcesses(browser_processes_config(settings), jail=jail)
            try:
                await _serves_tasks_with_the_guard(tmp_path, sites, processes)
            finally:
                await processes.close()
    finally:
        await jail.close()
    assert sites.log.requests == []


async def _serves_tasks_with_the_guard(
    tmp_path: Path, sites: Sites, processes: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path / "gw", sites, processes) as b:
        task = await b.task()
        nav = await b.call(task, "browser.navigate", url="/")
        assert nav.ok, nav
        assert 'heading "Agents"' in nav.output["snapshot"]
        escaped = await b.call(task, "browser.navigate", url="/redirect")
        assert escaped.status is ToolStatus.DENIED
        assert escaped.error is not None and escaped.error.code == "origin_blocked"
        session = b.pool.session(task.task_id)
        assert session is not None and session.process.pid is None  # the remote one


async def test_a_remote_browser_outside_the_jail_is_never_used(
    tmp_path: Path, sites: Sites
) -> None:
    # Every guard flag, but the browser shares the host's network: the guard probe's
    # request does not arrive through a jail, and its WebRTC would reach any UDP port.
    args = launch_args(extra=GUARD_ARGS, disable_features=TASK_BROWSER_DISABLED_FEATURES)
    async with (
        playwright_server(tmp_path, args) as server,
        browser_gateway(tmp_path / "gw", sites, browser_ws_endpoint=server.endpoint) as b,
    ):
        task = await b.task()
        nav = await b.call(task, "browser.navigate", url="/")
        assert nav.status is ToolStatus.UNAVAILABLE
        assert nav.error is not None and nav.error.code == "browser_unavailable"
        assert "network jail" in nav.error.message
        assert b.gw.services.get(BrowserPool).live_count() == 0
    assert sites.log.requests == []


async def test_with_the_jail_off_a_browser_that_goes_around_the_proxy_is_never_used(
    tmp_path: Path, sites: Sites
) -> None:
    # Launched without --proxy-bypass-list=<-loopback>, by a server whose Playwright does
    # not add `<-loopback>` to each context's proxy rules (older ones did not; this switch
    # turns it off in the pinned one): Chromium would reach loopback origins directly, past
    # every context's proxy.
    unguarded = {"PLAYWRIGHT_DISABLE_FORCED_CHROMIUM_PROXIED_LOOPBACK": "1"}
    async with (
        playwright_server(tmp_path, launch_args(), unguarded) as server,
        browser_gateway(
            tmp_path / "gw", sites, browser_ws_endpoint=server.endpoint, browser_network_jail=False
        ) as b,
    ):
        task = await b.task()
        refused = await b.call(task, "browser.navigate", url=sites.foreign + "/direct")
        assert refused.error is not None and refused.error.code == "origin_blocked"
        nav = await b.call(task, "browser.navigate", url="/")
        assert nav.status is ToolStatus.UNAVAILABLE
        assert nav.error is not None and nav.error.code == "browser_unavailable"
        assert "--proxy-bypass-list=<-loopback>" in nav.error.message
        assert b.gw.services.get(BrowserPool).live_count() == 0
    assert sites.log.requests == []


@contextlib.asynccontextmanager
async def remote_only_gateway(
    tmp_path: Path, sites: Sites, jail: BrowserJail, servers: list[Server]
) -> AsyncIterator[BrowserGateway]:
    """A gateway whose browsers are the servers' only, no Chromium of its own."""
    endpoints = [s.endpoint for s in servers]
    settings = browser_settings(tmp_path / "gw", browser_ws_endpoints=endpoints)
    processes = BrowserProcesses(browser_processes_config(settings), local=0, jail=jail)
    try:
        async with browser_gateway(tmp_path / "gw", sites, processes) as b:
            yield b
    finally:
        await processes.close()


async def _endpoint_of(b: BrowserGateway, task: TaskIdentity) -> str | None:
    session = b.pool.session(task.task_id)
    assert session is not None
    return session.process.endpoint


async def test_contexts_spread_over_several_servers_and_one_dying_costs_only_its_tasks(
    tmp_path: Path, sites: Sites, caplog: pytest.LogCaptureFixture
) -> None:
    jail = BrowserJail()
    await jail.start()
    try:
        async with (
            playwright_servers(tmp_path, (JAILED_ARGS, jail), (JAILED_ARGS, jail)) as servers,
            remote_only_gateway(tmp_path, sites, jail, servers) as b,
        ):
            first, second = servers
            tasks = [await b.task() for _ in range(4)]
            opened = await asyncio.gather(
                *(b.call(t, "browser.navigate", url="/set?who=t") for t in tasks)
            )
            assert all(r.ok for r in opened), opened
            placed = {t.task_id: await _endpoint_of(b, t) for t in tasks}
            # The least loaded takes each new context: two on each server.
            assert Counter(placed.values()) == {first.endpoint: 2, second.endpoint: 2}

            victims = [t for t in tasks if placed[t.task_id] == first.endpoint]
            bystanders = [t for t in tasks if placed[t.task_id] == second.endpoint]
            lost = b.pool.session(victims[0].task_id)
            assert lost is not None
            first.kill()
            await lost.process.died.wait()

            for victim in victims:
                failed = await b.call(victim, "browser.snapshot")
                assert failed.status is ToolStatus.UNAVAILABLE, failed
                assert failed.error is not None
                assert failed.error.code == "browser_unavailable" and failed.error.retryable
            # The other server's tasks never noticed: same page, then same cookie.
            for bystander in bystanders:
                kept = await b.call(bystander, "browser.snapshot")
                assert kept.ok, kept
                assert "stored" in kept.output["snapshot"]
                shown = await b.call(bystander, "browser.navigate", url="/show")
                assert shown.ok, shown
                assert "cookie=who=t" in shown.output["snapshot"]

            # A victim's next call gets a fresh context on the server still there.
            again = await b.call(victims[0], "browser.navigate", url="/show")
            assert again.ok, again
            assert "cookie=none" in again.output["snapshot"]
            assert await _endpoint_of(b, victims[0]) == second.endpoint

            # With both gone a call says why, and neither it nor the log gives away a
            # server's path (what keeps others off a `launch-server`).
            still = b.pool.session(bystanders[0].task_id)
            assert still is not None
            second.kill()
            await still.process.died.wait()
            late = await b.call(await b.task(), "browser.navigate", url="/")
            assert late.error is not None and late.error.code == "browser_unavailable"
            assert "could not start" in late.error.message
            told = [late.error.message, *(r.getMessage() for r in caplog.records)]
            for server in servers:
                secret = urlsplit(server.endpoint).path
                assert not [line for line in told if secret in line]
    finally:
        await jail.close()
    assert sites.log.requests == []


async def test_a_server_outside_the_jail_among_several_never_serves(
    tmp_path: Path, sites: Sites, caplog: pytest.LogCaptureFixture
) -> None:
    jail = BrowserJail()
    await jail.start()
    outside = launch_args(extra=GUARD_ARGS, disable_features=TASK_BROWSER_DISABLED_FEATURES)
    try:
        async with (
            playwright_servers(tmp_path, (outside, None), (JAILED_ARGS, jail)) as servers,
            remote_only_gateway(tmp_path, sites, jail, servers) as b,
        ):
            jailed = servers[1]  # the first, outside the jail, is listed first
            tasks = [await b.task() for _ in range(3)]
            for task in tasks:
                nav = await b.call(task, "browser.navigate", url="/")
                assert nav.ok, nav
                assert await _endpoint_of(b, task) == jailed.endpoint
            assert [p.endpoint for p in b.pool.processes.live()] == [jailed.endpoint]
            # It was tried, and refused at its probe, which the operator is told.
            refusals = [r.getMessage() for r in caplog.records if "is not used" in r.getMessage()]
            assert refusals and all("browser 0 (remote" in m for m in refusals)
            assert "network jail" in refusals[0]
    finally:
        await jail.close()
    assert sites.log.requests == []
