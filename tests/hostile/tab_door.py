"""Replaying corpus cases at the tab channel, `WS /v1/tabs`, with the `websockets` client.

A case may ask for a pending UI action first (`"pending": true`): the gateway sends the tab
a `read_view` request, and the case's frames can then name `$request_id`, `$task_id`,
`$tab_id` and `$revision`, each forged in one field. The real tab answers afterwards, which
shows the forged reply left the request pending for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.core.tokens import Purpose
from gateway.tabs import ReadView, TabHub, TabOutcome
from tests.hostile.arena import DASHBOARD, SENTINEL, Arena, build_token

TASK = "tab"  # the arena's task whose tab the cases play

RECV_S = 5.0


@dataclass
class TabRun:
    """What came back over one connection."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    handshake_status: int | None = None


@contextlib.asynccontextmanager
async def open_tab(
    arena: Arena, origin: str | None, url_token: bool = False
) -> AsyncIterator[ClientConnection]:
    url = arena.ws_url + (f"?token={arena.token('tab', TASK)}" if url_token else "")
    # A non-ASCII Origin goes on the wire as its UTF-8 bytes, as a hand-made client sends it
    # (the websockets client refuses to build such a header from text).
    if origin is not None and not origin.isascii():
        origin = origin.encode().decode("latin-1")
    headers = {} if origin is None else {"Origin": origin}
    async with connect(url, additional_headers=headers, open_timeout=RECV_S) as ws:
        yield ws


async def recv(
    ws: ClientConnection, run: TabRun, until: str | None = None
) -> dict[str, Any] | None:
    """The next frame (of type `until`, skipping pings and others); None once closed."""
    while True:
        try:
            text = await asyncio.wait_for(ws.recv(), RECV_S)
        except ConnectionClosed as closed:
            run.close_code = closed.rcvd.code if closed.rcvd is not None else None
            return None
        frame: dict[str, Any] = json.loads(text)
        run.frames.append(frame)
        if frame.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
            continue
        if until is None or frame.get("type") == until:
            return frame


async def wait_closed(ws: ClientConnection, run: TabRun) -> None:
    while await recv(ws, run) is not None:
        pass


def hello(arena: Arena, spec: dict[str, Any], task: str = TASK) -> str:
    frame = dict(spec)
    token = frame.get("token")
    if isinstance(token, dict):
        frame["token"] = build_token(arena, token, Purpose.TAB, task)
    elif token is None:
        frame["token"] = arena.token("tab", task)
    return json.dumps(frame, ensure_ascii=False)


def fill(value: Any, slots: dict[str, Any]) -> Any:
    """Put the pending request's real values into a frame's `$name` placeholders."""
    if isinstance(value, str):
        if value in slots:
            return slots[value]
        for name, real in slots.items():
            value = value.replace(name, str(real))
        return value
    if isinstance(value, dict):
        return {k: fill(v, slots) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, slots) for v in value]
    return value


async def send_frame(ws: ClientConnection, frame: Any, slots: dict[str, Any]) -> None:
    if isinstance(frame, dict):
        await ws.send(json.dumps(fill(frame, slots), ensure_ascii=False))
    elif frame.startswith("$repeat:"):
        _, opening, count, closing = frame.split(":")
        await ws.send(opening * int(count) + closing * int(count))
    elif frame.startswith("$binary:"):
        await ws.send(bytes.fromhex(frame.split(":", 1)[1]))
    elif frame.startswith("$pad:"):
        await ws.send(json.dumps({"type": "pong", "pad": "x" * int(frame.split(":", 1)[1])}))
    else:
        await ws.send(frame)


async def first_frame(ws: ClientConnection, send: dict[str, Any], arena: Arena) -> None:
    if "first_raw" in send:
        await ws.send(send["first_raw"])
    elif "first_repeat" in send:
        opening, count, closing = send["first_repeat"]
        await ws.send(opening * count + closing * count)
    elif "first_binary_hex" in send:
        await ws.send(bytes.fromhex(send["first_binary_hex"]))
    elif "first_raw_pad" in send:
        await ws.send(json.dumps({"type": "hello", "pad": "x" * send["first_raw_pad"]}))
    elif "hello" in send:
        await ws.send(hello(arena, send["hello"]))


async def replay_tab(
    arena: Arena, send: dict[str, Any], expect: dict[str, Any]
) -> tuple[TabRun, Pending | None]:
    run = TabRun()
    origin = send.get("origin", DASHBOARD)
    pending: Pending | None = None
    try:
        async with open_tab(arena, origin, bool(send.get("url_token"))) as ws:
            if not send.get("silent"):
                await first_frame(ws, send, arena)
            welcome = await recv(ws, run)
            if welcome is None or welcome.get("type") != "welcome":
                await wait_closed(ws, run)
                return run, None
            slots = {"$task_id": arena.task_id(TASK), "$tab_id": welcome["tab_id"]}
            if send.get("pending"):
                pending = await Pending.start(arena, ws, run)
                slots.update(pending.slots)
                if send.get("answer_first"):
                    await pending.answer(ws)
            target = ws
            other: contextlib.AbstractAsyncContextManager[ClientConnection] | None = None
            if send.get("from_other_task"):
                other = open_tab(arena, DASHBOARD)
                target = await other.__aenter__()
                await target.send(hello(arena, {"type": "hello", "tab_id": "tab_o"}, "other"))
                assert (await recv(target, TabRun()) or {}).get("type") == "welcome"
            try:
                for frame in send.get("frames", []):
                    await send_frame(target, frame, slots)
                if send.get("frames"):
                    await collect(target, run, send, expect)
            finally:
                if other is not None:
                    await other.__aexit__(None, None, None)
            await after(arena, ws, run, pending)
    except InvalidStatus as refused:
        run.handshake_status = refused.response.status_code
    return run, pending


async def collect(
    ws: ClientConnection, run: TabRun, send: dict[str, Any], expect: dict[str, Any]
) -> None:
    """Read until the answer the frames provoke: an error, a tool result, or the close."""
    if "close" in expect:
        await wait_closed(ws, run)
        return
    frames = send.get("frames", [])
    wanted = len(frames)
    errors = 0
    while True:
        frame = await recv(ws, run)
        if frame is None:
            return
        if frame.get("type") == "error":
            errors += 1
            if errors >= wanted:
                return
        if frame.get("type") == "tool_result":
            return


async def after(arena: Arena, ws: ClientConnection, run: TabRun, pending: Pending | None) -> None:
    """If the connection is still open: answer the pending action, then a good tool call."""
    if run.close_code is not None:
        return
    if pending is not None and not pending.task.done():
        pending.kept = True
        await pending.answer(ws)
    good_id = arena.unique("good")
    await ws.send(
        json.dumps(
            {"type": "tool_call", "id": good_id, "tool": SENTINEL, "input": {"note": good_id}}
        )
    )
    while True:
        frame = await recv(ws, run, "tool_result")
        assert frame is not None, f"the connection closed before the good call: {run}"
        if frame.get("id") == good_id:
            run.frames.append({"type": "good_call", "status": frame["status"]})
            return


@dataclass
class Pending:
    """A `read_view` request the gateway sent the tab, awaited in the background."""

    task: asyncio.Task[TabOutcome]
    request: dict[str, Any]
    tab_id: str
    kept: bool = False

    @classmethod
    async def start(cls, arena: Arena, ws: ClientConnection, run: TabRun) -> Pending:
        hub = arena.gw.services.get(TabHub)
        identity = (await arena.gw.tasks.get(arena.task_id(TASK))).identity
        task = asyncio.ensure_future(hub.send(identity, ReadView(), timeout_s=20))
        request = await recv(ws, run, "request")
        assert request is not None
        welcome = next(f for f in run.frames if f.get("type") == "welcome")
        return cls(task, request, welcome["tab_id"])

    @property
    def slots(self) -> dict[str, Any]:
        return {"$request_id": self.request["id"], "$revision": self.request["revision"]}

    async def answer(self, ws: ClientConnection) -> None:
        await ws.send(
            json.dumps(
                {
                    "type": "reply",
                    "id": self.request["id"],
                    "task_id": self.request["task_id"],
                    "tab_id": self.tab_id,
                    "revision": self.request["revision"],
                    "ok": True,
                    "result": {"view": "home"},
                }
            )
        )
        await asyncio.wait_for(asyncio.shield(self.task), RECV_S)
