"""The UI action allowlist: what may reach a tab, and what never may."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gateway.tabs.actions import (
    DisplayProposedChange,
    OpenView,
    PopulateDraft,
    build_action,
    parse_action,
    target_holds,
)
from gateway.tabs.views import Views, unsafe_reason


class BuilderParams(BaseModel):
    agent_id: str
    tab: str = "instructions"


@pytest.fixture
def views() -> Views:
    v = Views()
    v.register("agent_builder", BuilderParams, "Agent builder")
    return v


@pytest.mark.parametrize(
    "value",
    [
        "https://evil.example/x",
        "see HTTP://evil.example",
        "//evil.example/path",
        "javascript:alert(1)",
        "JaVa\tScRiPt:alert(1)",
        " data:text/html,hi",
        "vbscript:msgbox",
        "<img src=x onerror=alert(1)>",
        "</script>",
        "<!-- x -->",
        "bell\x07",
    ],
)
def test_unsafe_labels_are_refused(value: str) -> None:
    assert unsafe_reason(value) is not None


@pytest.mark.parametrize("value", ["Helper v2", "a < b", "gpt-4.1", "local:llama-3", "ag_1"])
def test_ordinary_labels_pass(value: str) -> None:
    assert unsafe_reason(value) is None


def test_open_view_needs_a_registered_view_and_valid_params(views: Views) -> None:
    action = parse_action(
        {"type": "open_view", "view": "agent_builder", "params": {"agent_id": "a"}}, views
    )
    assert action == OpenView(view="agent_builder", params={"agent_id": "a", "tab": "instructions"})
    with pytest.raises(ValueError, match="no view named"):
        parse_action({"type": "open_view", "view": "admin", "params": {}}, views)
    with pytest.raises(ValueError, match="do not match"):
        parse_action({"type": "open_view", "view": "agent_builder", "params": {}}, views)


@pytest.mark.parametrize(
    "params",
    [
        {"agent_id": "javascript:alert(1)"},
        {"agent_id": "a", "tab": "https://evil.example"},
        {"agent_id": "<b>x</b>"},
    ],
)
def test_open_view_params_carry_no_url_or_markup(views: Views, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not allowed"):
        parse_action({"type": "open_view", "view": "agent_builder", "params": params}, views)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "navigate", "url": "https://evil.example"},
        {"type": "eval", "script": "alert(1)"},
        {"type": "read_view", "extra": 1},
        {"type": "show_run_progress", "run_id": "https://evil.example"},
        {"type": "populate_draft", "fields": {"model": "javascript:alert(1)"}},
        {"type": "populate_draft", "fields": {"name": "<script>x</script>"}},
        {"type": "populate_draft", "fields": {"tools": ["ok", "not a tool!"]}},
        {"type": "populate_draft", "fields": {"html": "<b>"}},
        {"type": "display_proposed_change", "title": "two\nlines"},
        {"type": "display_proposed_change", "title": "t", "diff": "x" * 60_001},
    ],
)
def test_anything_outside_the_allowlist_is_refused(views: Views, raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_action(raw, views)


def test_free_text_is_kept_verbatim(views: Views) -> None:
    diff = "- <b>old</b>\n+ <script>new()</script> https://x.example"
    action = parse_action(
        {"type": "display_proposed_change", "title": "Fix <b>", "summary": "s", "diff": diff},
        views,
    )
    assert isinstance(action, DisplayProposedChange)
    assert action.diff == diff
    assert action.args() == {"title": "Fix <b>", "summary": "s", "diff": diff}


def test_build_action_from_tool_args(views: Views) -> None:
    action = build_action(
        "populate_draft", {"agent_id": "ag_1", "fields": {"tools": ["a.b"]}}, views
    )
    assert action.wire() == {
        "type": "populate_draft",
        "agent_id": "ag_1",
        "fields": {"tools": ["a.b"]},
    }


def test_target_recheck_rules() -> None:
    draft = PopulateDraft.model_validate({"agent_id": "ag_1", "fields": {}})
    assert target_holds(draft, {"params": {"agent_id": "ag_1"}})
    assert target_holds(draft, {"params": {}, "selection": {"agent_id": "ag_1"}})
    assert not target_holds(draft, {"params": {"agent_id": "ag_2"}})
    assert not target_holds(
        PopulateDraft.model_validate({"fields": {}}),
        {"available_actions": ["read_view"]},
    )
    assert target_holds(OpenView(view="x"), {"available_actions": []})


def test_views_register_rules(views: Views) -> None:
    with pytest.raises(ValueError, match="already"):
        views.register("agent_builder", BuilderParams, "Again")
    with pytest.raises(ValueError, match="must be"):
        views.register("bad name", BuilderParams, "Bad")
    with pytest.raises(ValueError, match="markup"):
        views.register("x", BuilderParams, "<b>x</b>")
    [described] = views.describe()
    assert described["name"] == "agent_builder"
    assert described["params_schema"]["required"] == ["agent_id"]
