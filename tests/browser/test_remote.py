"""Task browsers from a remote Playwright server (`GATEWAY_BROWSER_WS_ENDPOINT`): one whose
browser runs in the gateway's network jail serves tasks with the guard intact; one outside
it is refused before any task uses it, even with every guard flag (its pages' WebRTC
sends UDP wherever they like), and so is one that goes around the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from gateway.browser import BrowserPool, BrowserProcesses
from gateway.browser.jail import BrowserJail
from gateway.browser.processes import GUARD_ARGS, TASK_BROWSER_DISABLED_FEATURES
from gateway.chromium import find_chromium, launch_args
from gateway.results import ToolStatus
from tests.browser.conftest import Sites, browser_gateway, browser_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

Server = Callable[[list[str]], AbstractAsyncContextManager[str]]


@contextlib.asynccontextmanager
async def playwright_server(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    jail: BrowserJail | None = None,
) -> AsyncIterator[str]:
    """`playwright launch-server` in its own process, as an operator runs it; its endpoint.
    With `jail`, its browser runs in that network jail, as the gateway's own do."""
    config = tmp_path / "server.json"
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
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        endpoint = line.decode().strip()
        assert endpoint.startswith("ws://"), endpoint
        yield endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_a_remote_browser_in_the_network_jail_serves_tasks(
    tmp_path: Path, sites: Sites
) -> None:
    jail = BrowserJail()
    await jail.start()
    args = launch_args(
        extra=GUARD_ARGS, disable_features=TASK_BROWSER_DISABLED_FEATURES, sandboxed=True
    )
    settings = browser_settings(tmp_path / "gw", browser_ws_endpoint="ws://set-below")
    try:
        async with playwright_server(tmp_path, args, jail=jail) as endpoint:
            settings.browser_ws_endpoint = endpoint
            processes = BrowserProcesses(settings, jail=jail)
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
        playwright_server(tmp_path, args) as endpoint,
        browser_gateway(tmp_path / "gw", sites, browser_ws_endpoint=endpoint) as b,
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
        playwright_server(tmp_path, launch_args(), unguarded) as endpoint,
        browser_gateway(
            tmp_path / "gw", sites, browser_ws_endpoint=endpoint, browser_network_jail=False
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
