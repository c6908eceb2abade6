"""The gateway's validator and the shim's, on the same actions in Chromium: the same verdict.

The shim validates with rules compiled from the gateway's models (`tab-rules.js`); this
runs every case of the hostile `ui_actions` corpus, and a set of valid actions and edge
cases (limits counted in code points, labels spliced with the whitespace a browser skips),
through both and requires that each accepts or refuses alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.http import health, tasks
from gateway.tabs import Views
from gateway.tabs import install as install_tabs
from gateway.tabs.actions import parse_action
from gateway.testing import live_gateway, test_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

CORPUS = Path(__file__).resolve().parents[1] / "tests/hostile/corpus/ui_actions.jsonl"


class BuilderParams(BaseModel):
    agent_id: str


def corpus_actions() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for line in CORPUS.read_text().splitlines():
        case = json.loads(line)
        call = case["send"]["call"]
        kind = call["name"].removeprefix("ui.")
        cases.append((case["id"], {**call.get("arguments", {}), "type": kind}))
    return cases


EMOJI = "\U0001f600"
EDGES: list[tuple[str, dict[str, Any]]] = [
    ("valid.read_view", {"type": "read_view"}),
    (
        "valid.open_view",
        {"type": "open_view", "view": "agent_builder", "params": {"agent_id": "ag_1"}},
    ),
    ("valid.progress", {"type": "show_run_progress", "run_id": "run_42"}),
    (
        "valid.draft",
        {
            "type": "populate_draft",
            "agent_id": "ag_1",
            "fields": {"name": "Triage", "instructions": "Be brief.\n<b>", "model": "gpt-4.1"},
        },
    ),
    ("valid.draft-null-agent", {"type": "populate_draft", "agent_id": None, "fields": {}}),
    ("valid.change", {"type": "display_proposed_change", "title": "T", "diff": "-a\n+b"}),
    ("limit.title-200-emoji", {"type": "display_proposed_change", "title": EMOJI * 200}),
    ("limit.title-201-emoji", {"type": "display_proposed_change", "title": EMOJI * 201}),
    (
        "limit.summary-4000",
        {"type": "display_proposed_change", "title": "t", "summary": "s" * 4000},
    ),
    (
        "limit.summary-4001",
        {"type": "display_proposed_change", "title": "t", "summary": "s" * 4001},
    ),
    ("limit.tools-64", {"type": "populate_draft", "fields": {"tools": ["a"] * 64}}),
    ("limit.tools-65", {"type": "populate_draft", "fields": {"tools": ["a"] * 65}}),
    ("text.nul", {"type": "display_proposed_change", "title": "t", "summary": "a\x00b"}),
    ("text.title-newline", {"type": "display_proposed_change", "title": "a\nb"}),
    ("label.bom-spliced", {"type": "populate_draft", "fields": {"name": "java\ufeffscript:x"}}),
    ("label.nbsp-spliced", {"type": "populate_draft", "fields": {"name": "java\xa0script:x"}}),
    ("label.unc", {"type": "populate_draft", "fields": {"name": "\\\\host\\share"}}),
    ("label.comment", {"type": "populate_draft", "fields": {"name": "a <!-- b"}}),
    ("label.c1-control", {"type": "populate_draft", "fields": {"name": "a\x85b"}}),
    ("type.title-number", {"type": "display_proposed_change", "title": 7}),
    ("type.fields-list", {"type": "populate_draft", "fields": []}),
    ("extra.field", {"type": "show_run_progress", "run_id": "r", "url": "x"}),
    ("params.missing", {"type": "open_view", "view": "agent_builder", "params": {}}),
    (
        "params.key-url",
        {"type": "open_view", "view": "agent_builder", "params": {"agent_id": "a", "http://x": 1}},
    ),
    ("view.unregistered", {"type": "open_view", "view": "admin", "params": {}}),
    ("type.unknown", {"type": "run_script", "code": "x"}),
]


async def test_both_validators_give_every_action_the_same_verdict(
    tmp_path: Path, dashboard_browser: Any
) -> None:
    views = Views()
    views.register("agent_builder", BuilderParams, "Agent builder")
    cases = corpus_actions() + EDGES
    assert len(cases) >= 50
    python: dict[str, bool] = {}
    for name, action in cases:
        try:
            parse_action(action, views)
            python[name] = True
        except ValueError:
            python[name] = False
    async with live_gateway(
        test_settings(tmp_path / "data"), extensions=[health.routes, tasks.routes, install_tabs]
    ) as live:
        context = await dashboard_browser.new_context()
        try:
            page = await context.new_page()
            await page.goto(live.base_url + "/healthz")
            verdicts = await page.evaluate(
                """async ([cases, views]) => {
                    const shim = await import("/webmcp.js");
                    const out = {};
                    for (const [name, action] of cases) {
                      out[name] = shim.validateAction(action, views);
                    }
                    return out;
                }""",
                [cases, views.describe()],
            )
            # A view whose params schema holds a non-schema refuses what it guards: the
            # request gets its invalid_input answer instead of a throw in the handler.
            odd = {
                "name": "odd",
                "title": "Odd",
                "params_schema": {"type": "object", "properties": {"a": {"anyOf": [True]}}},
            }
            malformed = await page.evaluate(
                """async (views) => {
                    const shim = await import("/webmcp.js");
                    const action = {type: "open_view", view: "odd", params: {a: 1}};
                    try { return shim.validateAction(action, views); }
                    catch (error) { return "threw: " + error; }
                }""",
                [odd],
            )
        finally:
            await context.close()
    shim = {name: reason is None for name, reason in verdicts.items()}
    differ = {name: (python[name], verdicts[name]) for name in python if python[name] != shim[name]}
    assert differ == {}
    # Both sides did judge: the valid ones pass, the corpus is refused.
    assert all(python[name] for name, _ in EDGES if name.startswith("valid."))
    assert not any(python[name] for name, _ in corpus_actions())
    assert malformed is not None and malformed.endswith("has no valid schema"), malformed
