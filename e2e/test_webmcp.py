"""WebMCP in real Chromium (native `document.modelContext`, --enable-features=WebMCP): the
page registers its task's catalog, and Playwright's `page.webmcp` plays the external agent."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from e2e.conftest import E2E
from gateway.browser.chromium import find_chromium, launch_args
from gateway.core.registry import Tool, ToolContext
from gateway.core.tokens import Purpose
from gateway.testing.agents import McpAgent
from gateway.testing.dashboard import DashboardPage
from gateway.testing.evidence import Evidence
from gateway.testing.script import Step, run_script

pytestmark = [pytest.mark.browser]
# Tests that change the gateway's catalog or registration in process use `e2e`; the others
# are written on the pytest plugin's fixtures.
in_process = pytest.mark.asyncio(loop_scope="session")

# Fields of a call's evidence record that differ from one call to the next by nature.
PER_CALL = {"call_id", "door", "started_at", "duration_ms", "seq"}


async def webmcp_page(e2e: E2E, **task: Any) -> tuple[dict[str, Any], Any, Any]:
    task.setdefault("scopes", ["ui", "demo"])
    body = await e2e.live.create_task(**task)
    identity = await e2e.live.gw.tasks.authenticate(body["tokens"]["tab"], Purpose.TAB)
    page = await e2e.page()
    await e2e.start(page, body["tokens"]["tab"])
    return body, identity, page


@in_process
async def test_ui_tool_through_webmcp_reaches_the_same_tab(e2e: E2E) -> None:
    _body, _identity, page = await webmcp_page(e2e)
    result = await page.webmcp.call_tool("ui_show_run_progress", {"run_id": "run_42"})
    assert result == {"shown": "run_42"}
    assert await page.text_content("#run") == "run_42"
    view = await page.webmcp.call_tool("ui_read_view", {})
    assert view["view"] == "agent_builder"


@in_process
async def test_tools_are_gone_when_the_tab_token_expires(e2e: E2E) -> None:
    body = await e2e.live.create_task(scopes=["ui", "demo"])
    short, _ = e2e.live.gw.tokens.mint(body["task_id"], Purpose.TAB, 4)
    page = await e2e.page()
    await e2e.start(page, short)
    tools = await page.webmcp.tools()
    # (On a very slow machine the token may already have run out here.)
    assert len(tools) == 7 or await page.evaluate("window.session.closed")
    [closed] = await e2e.wait_event(page, "closed")
    assert closed["reason"] == "token_expired"
    assert await page.webmcp.tools() == []


class NoteInput(BaseModel):
    note: str


@in_process
async def test_tools_are_registered_again_when_the_catalog_changes(e2e: E2E) -> None:
    _body, _identity, page = await webmcp_page(e2e)

    async def note(_ctx: ToolContext, args: NoteInput) -> dict[str, str]:
        return {"noted": args.note}

    e2e.live.gw.registry.add(
        Tool(
            name="demo.note",
            title="Note",
            description="Take a note.",
            input_model=NoteInput,
            handler=note,
            scopes=frozenset({"demo"}),
        )
    )
    await e2e.wait_event(page, "welcome")
    names = [t["name"] for t in await page.webmcp.tools()]
    assert "demo_note" in names and len(names) == 8
    assert await page.webmcp.call_tool("demo_note", {"note": "n"}) == {"noted": "n"}


POLYFILL = """() => {
  // Hide the native API and offer only a navigator.modelContext polyfill, as older
  // browsers with a polyfill do.
  Object.defineProperty(document, "modelContext", { value: undefined, configurable: true });
  const tools = new Map();
  Object.defineProperty(navigator, "modelContext", { configurable: true, value: {
    registerTool(tool, { signal }) {
      tools.set(tool.name, tool);
      signal.addEventListener("abort", () => tools.delete(tool.name));
      return Promise.resolve();
    },
  }});
  window.polyfillTools = tools;
}"""


@in_process
async def test_polyfill_registration_errors_and_abort(e2e: E2E) -> None:
    body = await e2e.live.create_task(scopes=["ui", "demo"], role="member")
    page = await e2e.page()
    await page.evaluate(POLYFILL)
    await e2e.start(page, body["tokens"]["tab"])
    names = await page.evaluate("[...window.polyfillTools.keys()].sort()")
    assert "demo_echo" in names and "demo_admin_only" not in names
    echo = "window.polyfillTools.get('demo_echo')"
    ok = await page.evaluate(f"{echo}.execute({{text: 'p'}}, {{signal: null}})")
    assert ok["text"] == "p"
    # A non-success throws an Error whose message starts with the status and the code.
    message = await page.evaluate(
        f"{echo}.execute({{text: 1}}, {{}}).then(() => 'no error', (e) => e.message)"
    )
    assert message.startswith("failed invalid_input")
    # Listing is not authority: the page asking for a tool it was not given is denied.
    denied = await page.evaluate("window.session.call('demo.admin_only', {})")
    assert (denied["status"], denied["error"]["code"]) == ("denied", "forbidden")
    # An aborted execute sends `cancel`: the UI action it waits on is cancelled in the tab.
    await page.evaluate("window.hold = true")
    await page.evaluate(
        """() => {
            window.abort = new AbortController();
            window.polyfillTools.get("ui_show_run_progress")
              .execute({run_id: "run_x"}, {signal: window.abort.signal})
              .catch((e) => { window.aborted = e.name; });
        }"""
    )
    await e2e.wait_event(page, "request")
    await page.evaluate("window.abort.abort()")
    [cancel] = await e2e.wait_event(page, "cancel")
    assert cancel["reason"] == "cancelled"
    assert await page.evaluate("window.aborted") == "AbortError"
    records = await e2e.live.evidence(body["task_id"], "call", wait_for=3)
    last = records[-1]
    assert (last["tool"], last["door"], last["status"], last["error"]["code"]) == (
        "ui.show_run_progress",
        "webmcp",
        "failed",
        "cancelled",
    )
    # pagehide withdraws every registration.
    await page.evaluate("window.dispatchEvent(new PageTransitionEvent('pagehide'))")
    assert await page.evaluate("window.polyfillTools.size") == 0


MCP_B_GLOBAL = "@mcp-b/global@5.1.0"


@pytest.fixture(scope="session")
def mcp_b_polyfill(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The @mcp-b/global WebMCP polyfill, fetched from npm once per session."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    where = tmp_path_factory.mktemp("mcp-b")
    packed = subprocess.run(
        [npm, "pack", MCP_B_GLOBAL, "--silent", "--pack-destination", str(where)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if packed.returncode != 0:
        pytest.skip(f"npm could not fetch {MCP_B_GLOBAL}: {packed.stderr.strip()[:200]}")
    with tarfile.open(where / packed.stdout.strip().splitlines()[-1]) as archive:
        member = archive.extractfile("package/dist/index.iife.js")
        assert member is not None
        script = where / "mcp-b-global.iife.js"
        script.write_bytes(member.read())
    return script


@in_process
async def test_mcp_b_polyfill_in_a_browser_without_native_webmcp(
    e2e: E2E, mcp_b_polyfill: Path
) -> None:
    body = await e2e.live.create_task(scopes=["ui", "demo"], budget={"max_calls": 2})
    identity = await e2e.live.gw.tasks.authenticate(body["tokens"]["tab"], Purpose.TAB)
    plain = await e2e.browser.browser_type.launch(
        executable_path=find_chromium(), args=launch_args(webmcp=False)
    )
    try:
        page = await (await plain.new_context()).new_page()
        await page.goto(e2e.site.origin + "/")
        await page.wait_for_function("typeof window.start === 'function'")
        assert await page.evaluate("typeof document.modelContext") == "undefined"
        await page.add_script_tag(path=str(mcp_b_polyfill))
        await e2e.start(page, body["tokens"]["tab"])
        listed = await page.evaluate(
            """async () => (await document.modelContext.getTools())
                 .map((t) => ({name: t.name, inputSchema: t.inputSchema}))"""
        )
        catalog = e2e.live.gw.registry.catalog(identity)
        assert listed == [{"name": t["name"], "inputSchema": t["input_schema"]} for t in catalog]
        run = """async ([name, input]) => {
            const mc = document.modelContext;
            const tool = (await mc.getTools()).find((t) => t.name === name);
            try { return JSON.parse(await mc.executeTool(tool, JSON.stringify(input))); }
            catch (e) { return {thrown: e.message}; }
        }"""
        ok = await page.evaluate(run, ["demo_echo", {"text": "poly"}])
        assert ok == {"text": "poly", "actor": "user_1", "task": body["task_id"]}
        view = await page.evaluate(run, ["ui_read_view", {}])
        assert view["view"] == "agent_builder"
        denied = await page.evaluate(run, ["demo_echo", {"text": "third"}])
        assert "denied budget_exceeded" in denied["thrown"]
        await e2e.live.end_task(body["task_id"])
        await page.wait_for_function("window.session.closed")
        assert await page.evaluate("document.modelContext.getTools()") == []
    finally:
        await plain.close()


ADMIN_TOOLS = [
    "demo_admin_only",
    "demo_echo",
    "ui_display_proposed_change",
    "ui_open_view",
    "ui_populate_draft",
    "ui_read_view",
    "ui_show_run_progress",
]


@pytest.mark.gateway_task(scopes=["ui", "demo"], role="admin")
def test_tools_are_exactly_the_identitys_catalog(
    dashboard_page: DashboardPage, mcp_agent: McpAgent, new_context: Any, gateway_task: Any
) -> None:
    tools = {t["name"]: t for t in dashboard_page.page.webmcp.tools()}
    # The same catalog an MCP client of the same task is given, schemas and all.
    listed = {t.name: t for t in mcp_agent.tools()}
    assert sorted(tools) == sorted(listed) == ADMIN_TOOLS
    for name, tool in tools.items():
        assert tool["inputSchema"] == listed[name].input_schema
        assert tool["description"] == listed[name].description
    assert tools["demo_echo"]["annotations"] == {"readOnly": True}
    assert tools["demo_admin_only"]["annotations"] == {"consequential": True}

    member = gateway_task(scopes=["ui", "demo"], role="member", actor="m1")
    member_page = DashboardPage(
        new_context().new_page(), dashboard_page.control, member, dashboard_page.host_origin
    ).open()
    names = member_page.webmcp().list_tools()
    assert "demo_admin_only" not in names
    assert "demo_echo" in names


@pytest.mark.gateway_task(scopes=["ui", "demo"], actor="dana")
def test_call_tool_equals_the_same_call_through_mcp(
    dashboard_page: DashboardPage, mcp_agent: McpAgent, evidence: Evidence
) -> None:
    via_webmcp = dashboard_page.webmcp().call("demo.echo", {"text": "same"})
    via_mcp = mcp_agent.call("demo.echo", {"text": "same"})
    expected = {"text": "same", "actor": "dana", "task": evidence.task_id}
    assert via_webmcp["output"] == via_mcp["output"] == expected
    records = evidence.calls("demo.echo")
    assert sorted(r["door"] for r in records) == ["mcp", "webmcp"]
    first, second = ({k: v for k, v in r.items() if k not in PER_CALL} for r in records)
    assert first == second


@pytest.mark.gateway_task(scopes=["ui", "demo"], budget={"max_calls": 1})
def test_a_denied_call_reaches_the_agent_with_its_status_and_code(
    dashboard_page: DashboardPage,
) -> None:
    report = run_script(
        dashboard_page.webmcp(),
        [
            Step("demo.echo", {"text": "one"}, expect={"text": "one"}),
            Step("demo.echo", {"text": "two"}, status="denied", error_code="budget_exceeded"),
        ],
    )
    report.assert_ok()


@pytest.mark.gateway_task(scopes=["ui", "demo"], role="admin")
def test_tools_are_gone_after_the_task_ends(
    dashboard_page: DashboardPage, gateway_task: Any
) -> None:
    agent = dashboard_page.webmcp()
    assert len(agent.list_tools()) == 7
    dashboard_page.control.end_task(gateway_task().task_id)
    dashboard_page.page.wait_for_selector('#gateway-state[data-state="disconnected"]')
    assert agent.list_tools() == []
