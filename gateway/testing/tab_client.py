"""A dashboard tab spoken from Python that connects again when its connection drops (with
jitter, to the next of its URLs: a cluster's front, or its nodes in turn), as the page's
shim does. For the cluster tests and benches, where a node goes away under a tab."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.testing.control import GatewayTask

ORIGIN = "http://127.0.0.1:8765"
# Closes after which a tab stops: the task ended, or another tab took its place.
FINAL = {4001, 4002, 4003, 1008}


@dataclass
class ClusterTab:
    """A dashboard tab of one task: answers UI actions, notes each one and where it was
    connected, and connects again (to `urls`, in turn) when its connection drops."""

    urls: list[str]
    task: GatewayTask
    tab_id: str = "tab-cluster"
    revision: int = 1
    actions: list[dict[str, Any]] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)  # the URL of each connection
    closes: list[int | None] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        attempt = 0
        while not self.ended.is_set():
            url = self.urls[attempt % len(self.urls)]
            attempt += 1
            with contextlib.suppress(OSError, ConnectionClosed, TimeoutError):
                await self._session(url)
            self.connected.clear()
            if self.ended.is_set():
                return
            await asyncio.sleep(random.uniform(0.05, 0.3))

    async def _session(self, url: str) -> None:
        ws_url = url.replace("http://", "ws://") + f"/v1/tabs?task={self.task.task_id}"
        async with connect(ws_url, origin=ORIGIN, open_timeout=5) as ws:  # type: ignore[arg-type]
            await ws.send(
                json.dumps(
                    {
                        "type": "hello",
                        "token": self.task.tab_token,
                        "tab_id": self.tab_id,
                        "revision": self.revision,
                        "view": self._view(),
                    }
                )
            )
            welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if welcome.get("type") != "welcome":
                self.closes.append(ws.close_code)
                if ws.close_code in FINAL:
                    self.ended.set()
                return
            self.connections.append(url)
            self.connected.set()
            try:
                async for raw in ws:
                    await self._answer(ws, json.loads(raw))
            finally:
                self.closes.append(ws.close_code)
                if ws.close_code in FINAL:
                    self.ended.set()

    def _view(self) -> dict[str, Any]:
        return {"view": "agents", "params": {}, "selection": {}, "available_actions": []}

    async def _answer(self, ws: Any, frame: dict[str, Any]) -> None:
        if frame["type"] == "ping":
            await ws.send(json.dumps({"type": "pong"}))
        elif frame["type"] == "request":
            self.actions.append(frame["action"])
            reply = {
                "type": "reply",
                "id": frame["id"],
                "task_id": self.task.task_id,
                "tab_id": self.tab_id,
                "revision": self.revision,
                "ok": True,
                "result": {**self._view(), "revision": self.revision},
            }
            await ws.send(json.dumps(reply))


@contextlib.asynccontextmanager
async def running_tab(urls: list[str], task: GatewayTask) -> AsyncIterator[ClusterTab]:
    tab = ClusterTab(urls, task)
    runner = asyncio.create_task(tab.run())
    try:
        await asyncio.wait_for(tab.connected.wait(), 30)
        yield tab
    finally:
        tab.ended.set()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
