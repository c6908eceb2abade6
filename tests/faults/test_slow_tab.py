"""A tab that says hello and then never reads again, while the gateway keeps sending it
large UI actions: the gateway must not buffer for it without bound. Requests end in time
with a contract outcome, memory stays bounded, and the connection is closed."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio

from gateway.app import build_app
from gateway.core.results import ToolStatus
from gateway.core.tasks.service import TaskCreate
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.tabs import ChannelLimits, DisplayProposedChange, TabConfig, TabHub, install
from gateway.testing import test_settings
from tests.conftest import task_body

DASHBOARD = "http://127.0.0.1:8765"
HEARTBEAT_S = 1.0
WAVES, PER_WAVE, DIFF_CHARS = 12, 48, 50_000


def rss() -> int:
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@dataclass
class Running:
    gw: Gateway
    hub: TabHub
    host: str
    port: int


@pytest_asyncio.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    gw = Gateway(
        test_settings(
            tmp_path / "data",
            dashboard_origins=[DASHBOARD],
        )
    )
    gw.services.provide(
        TabConfig,
        TabConfig(tick_s=0.2, write_timeout_s=1.0, limits=ChannelLimits(heartbeat_s=HEARTBEAT_S)),
    )
    app = build_app(gateway=gw, extensions=[health.routes, tasks.routes, install])
    async with serving(app) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        yield Running(gw, gw.services.get(TabHub), host, int(port))


def _masked_text(payload: bytes) -> bytes:
    """One client text frame (clients must mask), written by hand."""
    mask = os.urandom(4)
    head = bytes([0x81])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def silent_tab(
    running: Running, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Upgrade, say hello, then read nothing more: a tiny receive buffer and a reader
    that is never drained, so the gateway's writes back up."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (running.host, running.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /v1/tabs HTTP/1.1\r\nHost: {running.host}:{running.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {DASHBOARD}\r\n\r\n"
        ).encode()
    )
    response = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert response.startswith(b"HTTP/1.1 101"), response
    hello = {
        "type": "hello",
        "token": token,
        "tab_id": "tab_slow",
        "revision": 1,
        "view": {"view": "home", "params": {}},
    }
    writer.write(_masked_text(json.dumps(hello).encode()))
    await writer.drain()
    return reader, writer


async def test_a_tab_that_never_reads_is_not_buffered_without_bound(running: Running) -> None:
    identity, tokens = await running.gw.tasks.create(TaskCreate.model_validate(task_body()))
    reader, writer = await silent_tab(running, tokens["tab"])
    for _ in range(50):
        if running.hub.describe(identity.task_id).get("connected"):
            break
        await asyncio.sleep(0.05)
    assert running.hub.describe(identity.task_id)["connected"]
    baseline = rss()

    async def one(i: int) -> ToolStatus:
        # A distinct large text per request, so nothing is shared between frames.
        action = DisplayProposedChange(
            title=f"change {i}", summary="large", diff=f"{i}:" + "x" * DIFF_CHARS
        )
        outcome = await asyncio.wait_for(running.hub.send(identity, action, timeout_s=0.5), 10)
        return outcome.status

    statuses: list[ToolStatus] = []
    for wave in range(WAVES):
        statuses += await asyncio.gather(*(one(wave * PER_WAVE + i) for i in range(PER_WAVE)))
    grown = rss() - baseline
    sent_bytes = WAVES * PER_WAVE * DIFF_CHARS
    print(
        f"\nslow tab: {sent_bytes / 2**20:.1f} MiB sent at it, gateway grew {grown / 2**20:.1f} MiB"
    )

    # Every request ended in time, with a contract outcome, none of them a success.
    assert len(statuses) == WAVES * PER_WAVE
    assert set(statuses) <= {ToolStatus.TIMEOUT, ToolStatus.UNAVAILABLE}
    # What was sent is far more than what the gateway may hold for one tab.
    assert grown < sent_bytes / 4, (grown, sent_bytes)
    # The silent tab is dropped and its connection closed.
    for _ in range(100):
        if running.hub.connections._value.get() == 0:
            break
        await asyncio.sleep(0.1)
    assert running.hub.connections._value.get() == 0
    assert not running.hub.describe(identity.task_id).get("connected")
    # Once the tab drains what its socket holds, it finds the connection closed.
    async with asyncio.timeout(30):
        while await reader.read(65536):
            pass
    writer.close()
