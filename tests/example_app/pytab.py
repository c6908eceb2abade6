"""A dashboard tab spoken from Python over a real websocket, for the product tools' tests.

It holds the state a page would (view, params, revision, the last draft shown, the runs
whose progress is shown) and answers UI actions the way the dashboard's page script does:
`open_view` and `populate_draft` move to the view (a `state` frame, a new revision) and
reply on the current revision. The real page is exercised by the browser tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

ACTIONS = [
    "open_view",
    "populate_draft",
    "show_run_progress",
    "display_proposed_change",
    "read_view",
]


@dataclass
class PyTab:
    ws: ClientConnection
    task_id: str
    tab_id: str
    view: str = "agents"
    params: dict[str, Any] = field(default_factory=dict)
    revision: int = 1
    draft: dict[str, Any] | None = None
    progress: list[str] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    # The person at this tab: how they answer an approval they may answer (None: not at all).
    answer: str | None = "approve"
    approvals: list[dict[str, Any]] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "params": self.params,
            "selection": dict(self.params),
            "available_actions": ACTIONS,
        }

    async def move(self, view: str, params: dict[str, Any]) -> None:
        self.view, self.params = view, params
        self.revision += 1
        await self.ws.send(
            json.dumps({"type": "state", "revision": self.revision, "view": self.snapshot()})
        )

    async def apply(self, action: dict[str, Any]) -> dict[str, Any]:
        kind = action["type"]
        if kind == "open_view":
            await self.move(action["view"], action.get("params", {}))
            return {"view": self.view, "params": self.params}
        if kind == "populate_draft":
            agent = action.get("agent_id")
            if self.view != "agent_builder" or self.params.get("agent_id") != agent:
                await self.move("agent_builder", {"agent_id": agent} if agent else {})
            self.draft = action["fields"]
            return {"agent_id": agent, "applied": sorted(action["fields"]), "view": self.view}
        if kind == "show_run_progress":
            self.progress.append(action["run_id"])
            return {"run_id": action["run_id"], "shown": True}
        if kind == "read_view":
            return {**self.snapshot(), "revision": self.revision}
        return {"shown": True}

    async def serve(self) -> None:
        async for raw in self.ws:
            frame = json.loads(raw)
            if frame["type"] == "ping":
                await self.ws.send(json.dumps({"type": "pong"}))
            elif frame["type"] == "approval_request":
                self.approvals.append(frame)
                if frame["answerable"] and self.answer is not None:
                    await self.ws.send(
                        json.dumps(
                            {
                                "type": "approval",
                                "id": frame["id"],
                                "task_id": self.task_id,
                                "tab_id": self.tab_id,
                                "revision": frame["revision"],
                                "nonce": frame["nonce"],
                                "decision": self.answer,
                            }
                        )
                    )
            elif frame["type"] == "request":
                self.actions.append(frame["action"])
                result = await self.apply(frame["action"])
                await self.ws.send(
                    json.dumps(
                        {
                            "type": "reply",
                            "id": frame["id"],
                            "task_id": self.task_id,
                            "tab_id": self.tab_id,
                            "revision": self.revision,
                            "ok": True,
                            "result": result,
                        }
                    )
                )


@contextlib.asynccontextmanager
async def open_tab(
    gateway_url: str, token: str, task_id: str, *, origin: str, tab_id: str = "tab-py"
) -> AsyncIterator[PyTab]:
    url = gateway_url.replace("http://", "ws://") + "/v1/tabs"
    async with connect(url, origin=origin) as ws:  # type: ignore[arg-type]
        tab = PyTab(ws, task_id, tab_id)
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "token": token,
                    "tab_id": tab_id,
                    "revision": tab.revision,
                    "view": tab.snapshot(),
                }
            )
        )
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        server = asyncio.create_task(tab.serve())
        try:
            yield tab
        finally:
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await server
