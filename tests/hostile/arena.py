"""The gateway the hostile corpus is replayed against, and how a case's parts are built.

One real gateway serves a whole module (real HTTP and websockets over loopback). It carries
sentinel tools that count every run of their handler, so "nothing was accepted" is a
number that must not move. Tokens are never stored in the corpus: a case names a template
(`{"purpose_minted": "tab", "tamper": "signature"}`) and the token is minted here, at test
time, under the gateway's own keys.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from gateway.app import build_app, default_extensions
from gateway.core.registry import Tool, ToolContext
from gateway.core.tokens import Purpose, TokenService
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.tabs import ChannelLimits, TabConfig, Views
from gateway.testing import test_settings
from tests.conftest import task_body

CORPUS = Path(__file__).parent / "corpus"
DASHBOARD = "http://127.0.0.1:8765"
SENTINEL = "hostile.sentinel"
MAX_BODY = 64 * 1024
MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "hostile-corpus", "version": "1"},
}
HOSTILE_SCOPES = ("ui", "browser", "workspace:read", "workspace:write", "hostile")


class SentinelInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(max_length=100)
    count: int = 0


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BuilderParams(BaseModel):
    agent_id: str


@dataclass
class Sentinels:
    """What the sentinel tools saw: every handler run, and who it ran for."""

    calls: list[dict[str, Any]] = field(default_factory=list)


def install_sentinels(gw: Gateway, seen: Sentinels) -> None:
    async def sentinel(ctx: ToolContext, args: SentinelInput) -> dict[str, Any]:
        seen.calls.append({"task": ctx.identity.task_id, "door": ctx.door.value, "note": args.note})
        return {"ran": len(seen.calls)}

    async def whoami(ctx: ToolContext, _args: Empty) -> dict[str, Any]:
        seen.calls.append({"task": ctx.identity.task_id, "door": ctx.door.value, "note": "whoami"})
        return {"task_id": ctx.identity.task_id, "org_id": ctx.identity.org_id}

    reg = gw.registry
    # A side-effect tool: a bridge request claiming only `read` capability must not reach it.
    reg.add(
        Tool(
            name=SENTINEL,
            title="Sentinel",
            description="Counts its runs.",
            input_model=SentinelInput,
            handler=sentinel,
            scopes=frozenset({"hostile"}),
            side_effects=True,
        )
    )
    reg.add(
        Tool(
            name="hostile.whoami",
            title="Who am I",
            description="The identity the call ran under.",
            input_model=Empty,
            handler=whoami,
            scopes=frozenset({"hostile"}),
        )
    )
    # Registered but never granted: no hostile task holds the `secret` scope.
    reg.add(
        Tool(
            name="hostile.whoami_secret",
            title="Secret",
            description="Needs a scope no task has.",
            input_model=Empty,
            handler=whoami,
            scopes=frozenset({"secret"}),
        )
    )
    views = Views()
    views.register("agent_builder", BuilderParams, "Agent builder")
    gw.services.provide(Views, views)
    gw.services.provide(
        TabConfig, TabConfig(hello_timeout_s=1.0, limits=ChannelLimits(max_strikes=10))
    )


@dataclass
class Arena:
    base_url: str
    gw: Gateway
    http: httpx.AsyncClient
    seen: Sentinels
    tasks: dict[str, dict[str, Any]]  # main, narrow, other, ended: the POST /v1/tasks answers
    serial: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/v1/tabs"

    @property
    def control(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.gw.settings.control_key}"}

    def task_id(self, name: str = "main") -> str:
        return str(self.tasks[name]["task_id"])

    def token(self, purpose: str, task: str = "main") -> str:
        return str(self.tasks[task]["tokens"][purpose])

    def unique(self, prefix: str) -> str:
        return f"{prefix}_{next(self.serial)}"

    async def evidence(self, kind: str, task: str = "main") -> list[dict[str, Any]]:
        response = await self.http.get(
            f"/v1/tasks/{self.task_id(task)}/evidence", headers=self.control
        )
        records: list[dict[str, Any]] = response.json()["records"]
        return [r for r in records if r.get("kind") == kind]


@contextlib.asynccontextmanager
async def arena_at(tmp: Path) -> AsyncIterator[Arena]:
    settings = test_settings(
        tmp / "data",
        dashboard_origins=[DASHBOARD],
        max_body_bytes=MAX_BODY,
    )
    gw = Gateway(settings)
    seen = Sentinels()
    install_sentinels(gw, seen)
    app = build_app(gateway=gw, extensions=default_extensions())
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        control = {"authorization": f"Bearer {settings.control_key}"}
        tasks: dict[str, dict[str, Any]] = {}
        for name, body in {
            "main": task_body(org="org_h", scopes=HOSTILE_SCOPES),
            "narrow": task_body(org="org_h", actor="user_n", scopes=["ui"]),
            "other": task_body(org="org_o", actor="user_o", scopes=HOSTILE_SCOPES),
            # The tab channel's cases get a task of their own, so its evidence stays short.
            "tab": task_body(org="org_h", actor="user_t", scopes=HOSTILE_SCOPES),
            "ended": task_body(org="org_h", actor="user_e", scopes=HOSTILE_SCOPES),
        }.items():
            response = await http.post("/v1/tasks", json=body, headers=control)
            assert response.status_code == 201, response.text
            tasks[name] = response.json()
        ended = await http.delete(f"/v1/tasks/{tasks['ended']['task_id']}", headers=control)
        assert ended.status_code == 200
        yield Arena(base_url, gw, http, seen, tasks)


# -- building what a case sends -------------------------------------------------------------


def build_token(
    arena: Arena, spec: dict[str, Any] | None, default: Purpose, task: str = "main"
) -> str | None:
    """A token from a case's template; None means no credential at all."""
    if spec is None:
        return None
    tamper = spec.get("tamper")
    fixed = {
        "empty": "",
        "garbage": "not-a-token",
        "long": "a" * 3000,
        # An unsigned JWT naming the task: the gateway does not speak JWT at all.
        "jwt_none": "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJ0IjoidGFza19tYWluIn0.",
        "control_key": arena.gw.settings.control_key or "",
        "control_truncated": (arena.gw.settings.control_key or "")[:-1],
        "control_padded": (arena.gw.settings.control_key or "") + " x",
    }
    if tamper in fixed:
        return fixed[tamper]
    purpose = Purpose(spec.get("purpose_minted", default.value))
    task_id = {
        "unknown_task": "task_" + "0" * 24,
        "ended_task": arena.task_id("ended"),
    }.get(tamper or "", arena.task_id(task))
    service = (
        TokenService(["k-someone-elses-key-0123456789abcdef"])
        if tamper == "other_key"
        else arena.gw.tokens
    )
    token, _ = service.mint(task_id, purpose, -30 if tamper == "expired" else 600)
    if tamper == "signature":
        # Not the last character: its low bits are base64 padding, and changing only those
        # leaves the signature's bytes as they were.
        spot = len(token) - 10
        token = token[:spot] + ("A" if token[spot] != "A" else "B") + token[spot + 1 :]
    elif tamper == "payload":
        token = ("e" if token[0] != "e" else "f") + token[1:]
    elif tamper == "truncate":
        token = token[:-6]
    elif tamper == "case":
        token = token.swapcase()
    return token


def auth_headers(arena: Arena, spec: Any, default: Purpose) -> dict[str, str]:
    if isinstance(spec, dict) and spec.get("tamper") in ("basic_scheme", "control_basic"):
        secret = arena.token(default.value) if spec["tamper"] == "basic_scheme" else "x"
        return {"authorization": f"Basic {secret}"}
    token = build_token(arena, spec, default)
    # An empty token goes as a bare `Bearer` (HTTP clients refuse a trailing space).
    return {} if token is None else {"authorization": f"Bearer {token}".rstrip()}


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def expand(value: Any) -> Any:
    """Replace `$deep:N` strings with N nested objects."""
    if isinstance(value, str) and value.startswith("$deep:"):
        return deep(int(value.split(":", 1)[1]))
    if isinstance(value, dict):
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def raw_body(send: dict[str, Any], key: str = "body") -> bytes:
    """The bytes of an HTTP case: raw text, hex, a repeated nesting, or a JSON document."""
    if "raw" in send:
        return str(send["raw"]).encode()
    if "raw_hex" in send:
        return bytes.fromhex(send["raw_hex"])
    if "raw_repeat" in send:
        opening, count, closing = send["raw_repeat"]
        text: str = (
            send.get("raw_prefix", "")
            + opening * count
            + send.get("raw_middle", "")
            + closing * count
            + send.get("raw_suffix", "")
        )
        return text.encode()
    document = expand(send[key])
    if "pad_to" in send and isinstance(document, dict):
        document = {**document, "pad": "x" * int(send["pad_to"])}
    try:
        return json.dumps(document, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # Lone surrogates exist only as JSON escapes (`"\\ud800"`): send them so.
        return json.dumps(document).encode()


async def chunks(data: bytes, size: int = 8192) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                case = json.loads(line)
                case["_source"] = f"{path.name}:{number}"
                cases.append(case)
    return cases
