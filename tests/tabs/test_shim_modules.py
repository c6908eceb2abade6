"""The shim's ES modules: every one webmcp.js reaches is served and packed, and the label
rule they apply from the compiled rules reads each string as the Python one does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.tabs.shim import SHIM_NAMES
from gateway.tabs.views import unsafe_reason

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


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_shims_label_rule_gives_the_python_reasons() -> None:
    script = (
        'const { unsafeReason } = await import("./webmcp_js/labels.js");'
        "const labels = JSON.parse(process.argv[1]);"
        "process.stdout.write(JSON.stringify(labels.map(unsafeReason)));"
    )
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(LABELS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [unsafe_reason(label) for label in LABELS]
