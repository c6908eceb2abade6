"""The shim's ES modules: every one webmcp.js reaches is served and packed, and the rules
they apply from the compiled ones (the label rule, the recheck of an action's target)
judge each case as the Python ones do."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.tabs.actions import ACTION_TYPES, build_action, target_holds
from gateway.tabs.shim import SHIM_NAMES
from gateway.tabs.views import Views, unsafe_reason

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "webmcp_js"
# `import ... from "./x.js"` and `export ... from "./x.js"`: the shim's static imports.
SIBLING = re.compile(r"""^(?:import|export)\b[^;]*?\bfrom\s+"\./([^"]+)";""", re.M | re.S)


def reached(entry: str = "webmcp.js") -> set[str]:
    """The modules a browser fetches when it imports `entry`, `entry` included."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += SIBLING.findall((SHIM / name).read_text())
    return seen


def test_every_module_the_shim_imports_is_served_linked_and_packed() -> None:
    modules = reached()
    assert {"actions.js", "schema.js", "labels.js", "webmcp-tools.js", "tab-rules.js"} <= modules
    assert modules <= set(SHIM_NAMES)
    manifest = json.loads((SHIM / "package.json").read_text())
    assert set(manifest["files"]) == set(SHIM_NAMES)
    for name in SHIM_NAMES:
        assert (ROOT / "gateway" / "static" / name).read_bytes() == (SHIM / name).read_bytes()


LABELS = [
    "Agent builder",
    "//evil.example",
    "\\\\evil.example",
    "\\single",
    "a//b",
    " \t//spaced",
    "/ /folded",
    "https://x.example",
    "HTTPS://X",
    "java\tscript:alert(1)",
    "data:text/html,x",
    "<b>bold</b>",
    "a < b",
    "<!-- note",
    "bell\x07",
    "\x85//next-line",
    "caf\u00e9 \U0001f600",
    "",
]


def run_node(script: str, *args: str) -> Any:
    """What `script` (an ES module run from the repository's root) writes, as JSON."""
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs node")


@needs_node
def test_the_shims_label_rule_gives_the_python_reasons() -> None:
    script = (
        'const { unsafeReason } = await import("./webmcp_js/labels.js");'
        "const labels = JSON.parse(process.argv[1]);"
        "process.stdout.write(JSON.stringify(labels.map(unsafeReason)));"
    )
    assert run_node(script, json.dumps(LABELS)) == [unsafe_reason(label) for label in LABELS]


ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("open_view", {"view": "agent_builder"}),
    ("read_view", {}),
    ("show_run_progress", {"run_id": "run_1"}),
    ("display_proposed_change", {"title": "t"}),
    ("populate_draft", {"fields": {}}),
    ("populate_draft", {"agent_id": "ag_1", "fields": {}}),
]
VIEWS: list[dict[str, Any]] = [
    {},
    {"params": {"agent_id": "ag_1"}},
    {"params": {}, "selection": {"agent_id": "ag_1"}},
    {"params": {"agent_id": "ag_2"}, "selection": {"agent_id": ["ag_1"]}},
    {"params": ["ag_1"], "selection": None},
    {"available_actions": []},
    {"available_actions": ["read_view", "populate_draft"], "params": {"agent_id": "ag_1"}},
    {"available_actions": ["show_run_progress"]},
    {"available_actions": "populate_draft"},
]


class NoParams(BaseModel):
    pass


@needs_node
def test_the_shims_target_recheck_gives_the_python_verdicts() -> None:
    views = Views()
    views.register("agent_builder", NoParams, "Agent builder")
    actions = [build_action(kind, args, views) for kind, args in ACTIONS]
    assert {action.type for action in actions} == set(ACTION_TYPES)
    script = (
        'const { targetHolds } = await import("./webmcp_js/actions.js");'
        "const [actions, views] = JSON.parse(process.argv[1]);"
        "process.stdout.write(JSON.stringify("
        "actions.map((a) => views.map((v) => targetHolds(a, v)))));"
    )
    python = [[target_holds(action, view) for view in VIEWS] for action in actions]
    shim = run_node(script, json.dumps([[action.wire() for action in actions], VIEWS]))
    assert shim == python
    assert any(not verdict for row in python for verdict in row)
