"""The task browser's network, attacked from a page of the allowed app: packets that are
not HTTP (WebRTC, STUN, TURN, QUIC, name lookups) must not reach anything but the guard.

The listeners stand where an attacker would: TCP and UDP on 127.0.0.1, 127.0.0.2 and ::1.
Each records every datagram and connection, so a single STUN binding request is a failure.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import urlencode

import pytest

from gateway.browser.jail import network_namespace
from gateway.browser.memory import command_line, process_tree
from tests.browser.conftest import BrowserGateway
from tests.browser.listeners import foreign_listeners

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# WebRTC repeats its connectivity checks and STUN requests for seconds; a leak shows well
# within this time (the attack found about 100 datagrams in 6 s).
LISTEN_S = 4.0


async def test_no_packet_leaves_by_webrtc_stun_turn_quic_or_name(browsers: BrowserGateway) -> None:
    async with foreign_listeners() as listeners:
        query = urlencode(
            {
                "udp": ",".join(f"{a}:{p}" for a, p in listeners.udp.items()),
                "tcp": ",".join(f"{a}:{p}" for a, p in listeners.tcp.items()),
                "names": "leak-probe.example,localhost",
            }
        )
        task = await browsers.task()
        result = await browsers.call(task, "browser.navigate", url=f"/network?{query}")
        assert result.ok, result
        waited = await browsers.call(task, "browser.wait_for", text="attempted", timeout_ms=10_000)
        assert waited.ok, waited
        await asyncio.sleep(LISTEN_S)
        reached = sorted({(p, a) for p, a, _port, _data in listeners.heard.events})
        assert listeners.heard.events == [], (len(listeners.heard.events), reached)
    assert browsers.sites.log.requests == []


def _proc(pid: int, name: str) -> list[str]:
    return Path(f"/proc/{pid}/{name}").read_text().splitlines()


def _status_field(pid: int, name: str) -> str:
    for line in _proc(pid, "status"):
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name} for {pid}")


async def test_the_task_browser_has_no_network_but_its_own_loopback(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/")).ok
    session = browsers.pool.session(task.task_id)
    assert session is not None and session.process.pid is not None
    for pid in process_tree(session.process.pid):
        # Every process of the browser (its network service included) sees one interface,
        # its own loopback, and no route: no name server or host is reachable from there.
        devices = _proc(pid, "net/dev")[2:]
        assert [d.split(":", 1)[0].strip() for d in devices] == ["lo"], (pid, devices)
        assert _proc(pid, "net/route")[1:] == []
        assert network_namespace(pid) != network_namespace("self")


async def test_the_task_browser_runs_unprivileged_with_its_own_sandbox(
    browsers: BrowserGateway,
) -> None:
    task = await browsers.task()
    assert (await browsers.call(task, "browser.navigate", url="/")).ok
    session = browsers.pool.session(task.task_id)
    assert session is not None and session.process.pid is not None
    browser_pid = session.process.pid
    assert "--no-sandbox" not in command_line(browser_pid)
    assert _status_field(browser_pid, "Uid").split()[0] != "0"
    assert _status_field(browser_pid, "NoNewPrivs") == "1"
    renderers = [
        pid for pid in process_tree(browser_pid) if "--type=renderer" in " ".join(command_line(pid))
    ]
    assert renderers
    for pid in renderers:
        # Chromium's namespace sandbox: each renderer in user and pid namespaces of its own.
        assert (
            os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat(f"/proc/{browser_pid}/ns/user").st_ino
        )
        assert (
            os.stat(f"/proc/{pid}/ns/pid").st_ino != os.stat(f"/proc/{browser_pid}/ns/pid").st_ino
        )
