"""A tiny dashboard test page on its own loopback origin that imports the gateway's shim.

The page renders every UI action into the DOM with textContent (the way a real dashboard
must), logs the shim's events in `window.events`, and can hold an action open (`window.hold
= true`) so tests can race replies, cancellations and navigations against it.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Test dashboard</title>
<style>body{font:14px sans-serif;margin:16px}
section{border:1px solid #ccc;padding:8px;margin:8px 0}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}</style></head>
<body>
<h1>Test dashboard</h1>
<section>view: <span id="view">home</span> <code id="params">{}</code></section>
<section><h2>Draft</h2>
  name: <span id="draft-name"></span><br>
  model: <span id="draft-model"></span><br>
  tools: <span id="draft-tools"></span><br>
  <textarea id="draft-instructions" rows="3" cols="60"></textarea></section>
<section><h2>Run</h2> <span id="run"></span></section>
<section><h2 id="change-title"></h2><p id="change-summary"></p>
<pre id="change-diff"></pre></section>
<script type="module">
window.events = [];
window.hold = false;
const releases = [];
window.release = () => { window.hold = false; releases.splice(0).forEach((r) => r()); };
const $ = (id) => document.getElementById(id);
async function maybeHold(signal) {
  if (!window.hold) return;
  await new Promise((resolve, reject) => {
    releases.push(resolve);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}
window.current = { view: "agent_builder", params: { agent_id: "ag_1" }, selection: {} };
window.navigate = (view, params) => {
  window.current = { view, params, selection: {} };
  $("view").textContent = view;
  $("params").textContent = JSON.stringify(params);
  return window.session.state(window.current);
};
const actions = {
  async open_view({ view, params }, { signal }) {
    await maybeHold(signal);
    window.navigate(view, params);
    return { opened: view };
  },
  async populate_draft({ agent_id, fields }, { signal }) {
    await maybeHold(signal);
    if (fields.name !== undefined) $("draft-name").textContent = fields.name;
    if (fields.model !== undefined) $("draft-model").textContent = fields.model;
    if (fields.tools !== undefined) $("draft-tools").textContent = fields.tools.join(", ");
    if (fields.instructions !== undefined) $("draft-instructions").value = fields.instructions;
    return { populated: Object.keys(fields).sort() };
  },
  async show_run_progress({ run_id }, { signal }) {
    await maybeHold(signal);
    $("run").textContent = run_id;
    return { shown: run_id };
  },
  async display_proposed_change({ title, summary, diff }, { signal }) {
    await maybeHold(signal);
    $("change-title").textContent = title;
    $("change-summary").textContent = summary;
    $("change-diff").textContent = diff;
    return { displayed: true };
  },
};
window.start = async (options) => {
  const { connectGateway } = await import(options.gateway + "/webmcp.js");
  const session = await connectGateway({ ...options, actions, view: () => window.current });
  window.session = session;
  for (const type of ["welcome", "request", "applied", "cancel", "stale", "refused", "error",
                      "toolerror", "bye", "disconnect", "closed", "approval", "approval_closed",
                      "approval_refused", "approval_ready"]) {
    session.addEventListener(type, (event) => window.events.push({ ...event.detail, type }));
  }
  const tools = session.tools.map((t) => t.name);
  return { task_id: session.taskId, tab_id: session.tabId, tools };
};
window.tryStart = async (options) => {
  try { await window.start(options); return "connected"; }
  catch (error) { return String(error.message); }
};
</script></body></html>"""


def dashboard_app() -> Starlette:
    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    return Starlette(routes=[Route("/", page)])
