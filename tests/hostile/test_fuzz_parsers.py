"""Every parser that takes hostile input, fuzzed: it parses, or it fails in the gateway's own
way (its error types, or a structured failure), never with anything else.

Examples stay moderate so the module runs in well under a minute; the corpus next to it
holds the hand-picked cases, this holds the ones nobody thought of.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.bridge.delegation import ResultRejected, check_result
from gateway.bridge.delegation_envelopes import HostDelegationRequest
from gateway.bridge.envelopes import ParentToolRequest
from gateway.bridge.schemas import (
    DELEGATION_REQUEST_SCHEMA,
    DELEGATION_RESULT_SCHEMA,
    REQUEST_SCHEMA,
)
from gateway.bridge.validation import EnvelopeInvalid, load_json, parse_envelope
from gateway.browser.policy import page_url_allowed, resolve_target
from gateway.core.errors import AuthError, GatewayError, ToolFailure
from gateway.core.identity import Sandbox, TaskIdentity
from gateway.core.origins import OriginError, is_allowed, normalize_origin, origin_of
from gateway.core.results import Door, ToolResult, ToolStatus
from gateway.core.tasks.service import TaskCreate
from gateway.core.tokens import Purpose, TokenService
from gateway.runtime import Gateway
from gateway.settings import Settings
from gateway.tabs import TabChannel, Views
from gateway.tabs.actions import ACTION_TYPES, build_action, parse_action, target_holds
from gateway.tabs.effects import Send
from gateway.tabs.frames import parse_hello
from gateway.workspace.paths import split_path
from tests.hostile.arena import SENTINEL, BuilderParams, Sentinels, install_sentinels

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Text that leans towards what breaks parsers: separators, look-alikes, controls, surrogates.
TRICKY = st.sampled_from(
    [
        "\u200b", "\u200d", "\u202e", "\ufeff", "\x00", "\n", "\t", " ", "@", ":", "/", "\\",
        "[", "]", "#", "?", ".", "%", "\uff03", "\uff0e", "\u3002", "\u0669", "\u00b2", "е",
        "а", "0x", "017", "2130706433", "xn--", "javascript:", "data:", "//", "..", "\ud800",
        "<script>", "http://", "https://", "127.0.0.1", "[::1]", "localhost", "*",
    ]
)  # fmt: skip
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=8)), max_size=8).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def failing(parse: Any, *args: Any) -> Any:
    """What `parse` returned, or the exception it raised (checked by the caller: anything
    but the gateway's own error types fails the test)."""
    try:
        return parse(*args)
    except (GatewayError, EnvelopeInvalid, ResultRejected, ValueError) as exc:
        return exc


def _mutations(base: Any) -> st.SearchStrategy[Any]:
    """A valid document with one field replaced, dropped or added; or any JSON at all."""
    keys = sorted(base)
    replaced = st.tuples(st.sampled_from(keys), JSON).map(lambda kv: {**base, kv[0]: kv[1]})
    dropped = st.sampled_from(keys).map(lambda k: {x: v for x, v in base.items() if x != k})
    added = st.tuples(TEXT, JSON).map(lambda kv: {**base, kv[0]: kv[1]})
    return st.one_of(replaced, dropped, added, JSON)


# -- tokens and origins -----------------------------------------------------------------------

TOKENS = TokenService(["k-fuzz-newest-0123456789abcdef", "k-fuzz-older-0123456789abcdef"])
GOOD_TOKEN, _ = TOKENS.mint("task_fuzz", Purpose.AGENT, 600)


@FUZZ
@given(
    token=st.one_of(
        TEXT,
        st.tuples(st.integers(0, len(GOOD_TOKEN) - 1), TRICKY).map(
            lambda p: GOOD_TOKEN[: p[0]] + p[1] + GOOD_TOKEN[p[0] + 1 :]
        ),
        st.integers(0, len(GOOD_TOKEN)).map(lambda n: GOOD_TOKEN[:n]),
    ),
    purpose=st.sampled_from(list(Purpose)),
)
def test_token_verification(token: str, purpose: Purpose) -> None:
    try:
        claims = TOKENS.verify(token, purpose)
    except AuthError:
        return
    # Only the one genuine token verifies, and only for its own purpose.
    assert token == GOOD_TOKEN
    assert purpose is Purpose.AGENT
    assert claims.task_id == "task_fuzz"


@FUZZ
@given(
    value=st.one_of(
        TEXT, st.tuples(st.sampled_from(["http://", "https://", ""]), TEXT).map("".join)
    )
)
def test_origin_normalization(value: str) -> None:
    for parse in (normalize_origin, origin_of):
        try:
            normal = parse(value)
        except OriginError:
            continue
        # What passes is plain ASCII, a fixed point, and one of the two schemes.
        assert normal.isascii()
        assert normalize_origin(normal) == normal
        assert normal.startswith(("http://", "https://"))
        assert "@" not in normal
    assert is_allowed(value, frozenset({"http://127.0.0.1:9"})) in (True, False)


# -- the control plane's task body --------------------------------------------------------------

TASK = {
    "actor": {"id": "u1", "role": "admin"},
    "org_id": "org_a",
    "sandbox": {"id": "sb1", "app_origin": "http://127.0.0.1:9", "allowed_origins": []},
    "scopes": ["ui"],
    "budget": {"max_calls": 3},
    "ttl_s": 60,
}


@FUZZ
@given(
    body=st.one_of(
        _mutations(TASK),
        st.tuples(st.sampled_from(["actor", "sandbox", "budget"]), JSON).map(
            lambda kv: {**TASK, kv[0]: kv[1]}
        ),
        JSON.map(lambda v: {**TASK, "budget": {"max_calls": 1, "max_tokens": v}}),
    )
)
def test_task_create_body(body: Any) -> None:
    try:
        spec = TaskCreate.model_validate(body)
    except ValidationError:
        return
    # What is accepted can be stored: it serializes, and its origins are normal.
    json.loads(spec.model_dump_json())
    assert normalize_origin(spec.sandbox.app_origin) == spec.sandbox.app_origin


# -- the tab channel: hello, frames, UI actions -------------------------------------------------


def _views() -> Views:
    views = Views()
    views.register("agent_builder", BuilderParams, "Agent builder")
    return views


VIEWS = _views()
HELLO = {"type": "hello", "token": "t", "tab_id": "tab_1", "revision": 0, "view": {}}
FRAMES: list[Any] = [
    {"type": "reply", "id": "req_1", "task_id": "task_f", "tab_id": "tab_1", "revision": 0,
     "ok": True, "result": {}},
    {"type": "state", "revision": 1, "view": {"view": "agent_builder", "params": {}}},
    {"type": "tool_call", "id": "k1", "tool": "ui.read_view", "input": {}, "via": "webmcp"},
    {"type": "cancel", "id": "k1"},
    {"type": "pong"},
]  # fmt: skip


@FUZZ
@given(raw=_mutations(HELLO))
def test_hello(raw: Any) -> None:
    try:
        hello = parse_hello(raw)
    except ValueError:
        return
    assert hello.type == "hello"


@FUZZ
@given(
    frames=st.lists(
        st.one_of(
            st.sampled_from(FRAMES).flatmap(_mutations).map(json.dumps),
            TEXT,
            st.binary(max_size=16),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_tab_frames(frames: list[str | bytes]) -> None:
    channel = TabChannel("task_f")
    channel.connect("c1", "tab_1", 0, {"view": "agent_builder", "params": {}}, 0.0)
    channel.request("req_1", parse_action({"type": "read_view"}, VIEWS), 0.0, 30.0)
    for number, frame in enumerate(frames):
        if isinstance(frame, str) and "\ud800" in frame:
            continue  # a websocket text frame is UTF-8: it cannot carry a lone surrogate
        effects = channel.receive("c1", frame, 1.0 + number)
        # Whatever came in, the answer is a list of effects; every frame sent is JSON.
        for effect in effects:
            if isinstance(effect, Send):
                json.dumps(effect.frame)


ACTION_BASE: dict[str, dict[str, Any]] = {
    "open_view": {"type": "open_view", "view": "agent_builder", "params": {"agent_id": "ag_1"}},
    "populate_draft": {"type": "populate_draft", "agent_id": "ag_1", "fields": {"name": "n"}},
    "show_run_progress": {"type": "show_run_progress", "run_id": "run_1"},
    "display_proposed_change": {
        "type": "display_proposed_change", "title": "t", "summary": "s", "diff": "d"
    },
    "read_view": {"type": "read_view"},
}  # fmt: skip


@FUZZ
@given(
    raw=st.one_of(
        st.sampled_from(list[Any](ACTION_BASE.values())).flatmap(_mutations),
        st.tuples(st.sampled_from(ACTION_TYPES), TEXT).map(
            lambda kt: (
                {**ACTION_BASE[kt[0]], "type": kt[0]}
                | ({"params": {"agent_id": kt[1]}} if kt[0] == "open_view" else {})
            )
        ),
        TEXT.map(lambda t: {"type": t}),
    ),
    view=JSON,
)
def test_ui_actions(raw: Any, view: Any) -> None:
    try:
        action = parse_action(raw, VIEWS)
    except ValueError:
        return
    assert action.type in ACTION_TYPES
    dumped = action.model_dump(mode="json")
    # What is accepted carries no markup and no scheme in any label.
    text = json.dumps(dumped)
    assert "<script" not in text.lower()
    if isinstance(view, dict):
        assert target_holds(action, view) in (True, False)
    rebuilt = build_action(action.type, {k: v for k, v in dumped.items() if k != "type"}, VIEWS)
    assert rebuilt == action


# -- bridge and delegation envelopes ------------------------------------------------------------

PARENT_REQUEST = {
    "schema": REQUEST_SCHEMA,
    "version": 1,
    "request_id": "ptr_1",
    "tool": "workspace.read",
    "operation": "call",
    "input": {"path": "a"},
    "sandbox_session": {"caller_session_id": "job"},
    "authorization": {"allowed_tools": [], "principal": {}},
    "metadata": {},
}
DELEGATION = {
    "schema": DELEGATION_REQUEST_SCHEMA,
    "version": 1,
    "request_id": "hdr_1",
    "goal": "g",
    "sandbox_session_id": "s1",
    "source_digest": "a" * 64,
    "execution": {"steps": []},
}


@FUZZ
@given(data=_mutations(PARENT_REQUEST), text=TEXT)
def test_parent_tool_request_envelope(data: Any, text: str) -> None:
    refused = failing(parse_envelope, ParentToolRequest, data, REQUEST_SCHEMA)
    if isinstance(refused, EnvelopeInvalid):
        assert refused.message
        json.dumps(refused.diagnostics())
    else:
        assert isinstance(refused, ParentToolRequest)
        json.dumps(refused.wire())
    with contextlib.suppress(EnvelopeInvalid):
        load_json(text)


@FUZZ
@given(data=_mutations(DELEGATION), reply=_mutations({"schema": DELEGATION_RESULT_SCHEMA,
                                                     "version": 1, "request_id": "hdr_1",
                                                     "status": "completed"}))  # fmt: skip
def test_delegation_envelopes(data: Any, reply: Any) -> None:
    try:
        request = parse_envelope(HostDelegationRequest, data, DELEGATION_REQUEST_SCHEMA)
    except EnvelopeInvalid:
        request = parse_envelope(HostDelegationRequest, DELEGATION, DELEGATION_REQUEST_SCHEMA)
    # The adapter's answer is checked against the request: a result or a GatewayError-free
    # structured rejection, never anything else.
    result = failing(check_result, request, reply)
    if isinstance(result, Exception):
        # A structured rejection of the gateway's own (the bridge's rejection types).
        assert isinstance(result, GatewayError) or type(result).__module__.startswith("gateway."), (
            repr(result)
        )
        return
    json.dumps(result.wire())


# -- workspace paths and navigation targets -----------------------------------------------------


@FUZZ
@given(path=st.one_of(TEXT, st.lists(TEXT, max_size=40).map("/".join)))
def test_workspace_paths(path: str) -> None:
    parts = failing(split_path, path)
    if isinstance(parts, ToolFailure):
        assert parts.tool_status is ToolStatus.DENIED
        return
    assert parts
    assert all(p not in ("", ".", "..") and "/" not in p and "\x00" not in p for p in parts)


SANDBOX = Sandbox(id="sb1", app_origin="http://127.0.0.1:9", allowed_origins=())


@FUZZ
@given(
    url=st.one_of(TEXT, st.tuples(st.sampled_from(["http://127.0.0.1:9", "/"]), TEXT).map("".join))
)
def test_navigation_targets(url: str) -> None:
    assert page_url_allowed(url, SANDBOX.origins) in (True, False)
    target = failing(resolve_target, url, SANDBOX)
    if isinstance(target, ToolFailure):
        assert target.code == "origin_blocked"
        return
    # Whatever is allowed is on the sandbox's own origin.
    assert origin_of(target) in SANDBOX.origins


# -- the MCP door's arguments, through the pipeline ---------------------------------------------


@pytest.fixture(scope="module")
def pipeline_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    """A started gateway (no HTTP) with the sentinel tools, on a loop of this module's own."""
    loop = asyncio.new_event_loop()
    settings_ = Settings(
        data_dir=Path(tmp_path_factory.mktemp("fuzz")) / "data",
        secret_keys=["k-fuzz-newest-0123456789abcdef"],
        control_key="control-key-for-fuzz-0123456789",
        example=False,
    )
    gw = Gateway(settings_)
    seen = Sentinels()
    install_sentinels(gw, seen)
    loop.run_until_complete(gw.start())
    spec = TaskCreate.model_validate(
        {**TASK, "scopes": ["hostile", "workspace:read"], "budget": {}, "ttl_s": 3600}
    )
    identity, _ = loop.run_until_complete(gw.tasks.create(spec))
    try:
        yield loop, gw, seen, identity
    finally:
        loop.run_until_complete(gw.stop())
        loop.close()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.one_of(
        st.sampled_from([SENTINEL, "hostile.whoami", "workspace.read", "hostile.whoami_secret"]),
        st.tuples(st.sampled_from([SENTINEL, "workspace.read"]), TRICKY).map("".join),
        TEXT,
    ),
    arguments=st.one_of(JSON, st.fixed_dictionaries({"note": JSON}), st.just({"note": "ok"})),
)
def test_mcp_arguments_through_the_pipeline(
    pipeline_env: tuple[Any, ...], name: str, arguments: Any
) -> None:
    loop, gw, seen, identity = pipeline_env
    assert isinstance(identity, TaskIdentity)
    before = len(seen.calls)
    result = loop.run_until_complete(gw.pipeline.call(identity, name, arguments, door=Door.MCP))
    assert isinstance(result, ToolResult)
    wire = result.public()
    json.dumps(wire)
    ran = len(seen.calls) - before
    if result.status is ToolStatus.SUCCEEDED:
        assert name in (SENTINEL, "hostile.whoami", "workspace.read")
    else:
        assert result.error is not None
        assert ran == 0, "a refused call ran its handler"
        if name not in (SENTINEL, "hostile.whoami", "workspace.read", "hostile.whoami_secret"):
            assert (result.status, result.error.code) == (ToolStatus.DENIED, "unknown_tool")


def test_expired_identity_is_refused_by_the_pipeline(pipeline_env: tuple[Any, ...]) -> None:
    loop, gw, seen, identity = pipeline_env
    stale = identity.model_copy(update={"task_id": "task_" + "f" * 24})
    assert stale.expires_at > datetime.now(UTC) - timedelta(days=1)
    result = loop.run_until_complete(
        gw.pipeline.call(stale, SENTINEL, {"note": "x"}, door=Door.MCP)
    )
    assert result.status is ToolStatus.DENIED
    assert not [c for c in seen.calls if c["task"] == stale.task_id]


def test_a_lone_surrogate_in_a_nested_key_is_refused_by_the_envelope_parser() -> None:
    # Found by the fuzz above: it parsed, then failed when the envelope was written out.
    data = {**PARENT_REQUEST, "input": {"": {"\ud800": None}}}
    with pytest.raises(EnvelopeInvalid, match="lone surrogate"):
        parse_envelope(ParentToolRequest, data, REQUEST_SCHEMA)
