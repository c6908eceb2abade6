"""The shim as an npm package (`webmcp_js/package.json`), for dashboards that bundle their
scripts instead of loading `/webmcp.js` from the gateway's origin.

`npm pack` makes the tarball a registry would publish; a small front-end app installs it
(from the tarball, offline), imports it by its package name, is bundled with esbuild
(pinned in `tests/clients/package.json`), and is served from its own origin; in Chromium
with WebMCP on, the bundled shim connects to a task's tab and registers the task's tools,
and `page.webmcp` (an agent's view of the page) lists and calls them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.staticfiles import StaticFiles

from gateway.serving import serving
from gateway.tabs.shim import SHIM_NAMES
from tests.clients.npm import NODE_MODULES, ensure_installed
from tests.tabs.conftest import _start, register_views

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "webmcp_js"
ESBUILD = NODE_MODULES / "esbuild" / "bin" / "esbuild"
# The package ships what the gateway serves at its root, and its manifest.
SHIPPED = {"package.json", *SHIM_NAMES}

APP = """import { connectGateway } from "gateway-webmcp";

const view = { view: "agent_builder", params: { agent_id: "ag_1" }, selection: {} };
const actions = {
  async show_run_progress({ run_id }) {
    document.getElementById("run").textContent = run_id;
    return { shown: run_id };
  },
};
window.start = async (options) => {
  const session = await connectGateway({ ...options, actions, view: () => view });
  return { task_id: session.taskId, tools: session.tools.map((t) => t.name) };
};
"""
PAGE = """<!doctype html><meta charset="utf-8"><title>Bundled app</title>
<p>run: <span id="run"></span></p><script type="module" src="/app.js"></script>"""


def npm() -> str:
    found = shutil.which("npm")
    assert found is not None, "npm is needed (apt-get install npm)"
    return found


def run(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def pack(into: Path) -> Path:
    listing = json.loads(run(npm(), "pack", "--json", "--pack-destination", str(into), cwd=PACKAGE))
    filename: str = listing[0]["filename"]
    return into / filename


def test_the_package_ships_the_shim_its_rules_and_types_at_the_gateways_version(
    tmp_path: Path,
) -> None:
    tarball = pack(tmp_path)
    with tarfile.open(tarball) as tar:
        names = {name.removeprefix("package/") for name in tar.getnames()}
        manifest = json.load(tar.extractfile("package/package.json"))  # type: ignore[arg-type]
    assert names == SHIPPED
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert manifest["version"] == project["version"]
    assert manifest["type"] == "module"
    assert manifest["exports"]["."] == {"types": "./webmcp.d.ts", "default": "./webmcp.js"}
    # The packed files are the very ones the gateway serves at /webmcp.js.
    for name in SHIPPED - {"package.json"}:
        assert (ROOT / "gateway" / "static" / name).read_bytes() == (PACKAGE / name).read_bytes()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_bundled_app_registers_the_tasks_tools_through_the_packed_shim(
    tmp_path: Path, dashboard_browser: Any
) -> None:
    ensure_installed()
    app = tmp_path / "app"
    (app / "dist").mkdir(parents=True)
    (app / "package.json").write_text(json.dumps({"name": "app", "private": True}))
    (app / "main.js").write_text(APP)
    (app / "dist" / "index.html").write_text(PAGE)
    tarball = pack(tmp_path)
    run(npm(), "install", "--offline", "--no-audit", "--no-fund", str(tarball), cwd=app)
    run(
        str(ESBUILD),
        "main.js",
        "--bundle",
        "--format=esm",
        "--outfile=dist/app.js",
        cwd=app,
    )
    bundle = (app / "dist" / "app.js").read_text()
    assert "connectGateway" in bundle and "import(" not in bundle  # nothing fetched at run time
    site = Starlette()
    site.mount("/", StaticFiles(directory=app / "dist", html=True))
    async with serving(site) as origin, _start(tmp_path / "gw", [origin], None) as live:
        register_views(live.gw)
        body = await live.create_task(scopes=["ui"])
        context = await dashboard_browser.new_context()
        try:
            page = await context.new_page()
            await page.goto(origin + "/")
            await page.wait_for_function("typeof window.start === 'function'")
            started = await page.evaluate(
                "(o) => window.start(o)", {"gateway": live.base_url, "token": body["tokens"]["tab"]}
            )
            assert started["task_id"] == body["task_id"]
            tools = {tool["name"]: tool for tool in await page.webmcp.tools()}
            assert "ui_show_run_progress" in tools, sorted(tools)
            shown = await page.webmcp.call_tool("ui_show_run_progress", {"run_id": "run_7"})
            assert shown == {"shown": "run_7"}
            assert await page.text_content("#run") == "run_7"
        finally:
            await context.close()
        calls = await live.evidence(body["task_id"], "call")
    assert [(c["tool"], c["door"], c["status"]) for c in calls] == [
        ("ui.show_run_progress", "webmcp", "succeeded")
    ]
