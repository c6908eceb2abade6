"""The host page the plugin serves when a test names no app page: a dashboard in miniature
that connects through the shim and writes each of the five UI actions to a visible log
(`read_view` is answered by the shim from the page's view, and logged too).

Like an app page, it takes its tab token through the handoff hook the plugin calls after
the page has loaded, `window.gatewayConnect({gateway, token})`, never through its URL.
Everything the page shows is set with textContent.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Gateway host page</title>
<style>body{font:14px sans-serif;margin:16px} li{margin:4px 0}
#gateway-state{font-weight:bold}</style></head>
<body>
<h1>Gateway host page</h1>
<p>Channel: <span id="gateway-state" data-state="idle">idle</span>
 · view <code id="gateway-view">home</code></p>
<div id="gateway-approvals"></div>
<ol id="gateway-log" aria-label="UI actions"></ol>
<script type="module">
const $ = (id) => document.getElementById(id);
let current = { view: "home", params: {}, selection: {} };
window.gatewayLog = [];
function log(type, args, result) {
  window.gatewayLog.push({ type, args, result });
  const item = document.createElement("li");
  item.dataset.action = type;
  item.textContent = type + " " + JSON.stringify(args);
  $("gateway-log").append(item);
  return result;
}
const actions = {
  open_view: ({ view, params }) => {
    current = { view, params: params || {}, selection: {} };
    $("gateway-view").textContent = view;
    window.gatewaySession.state(current);
    return log("open_view", { view, params }, { opened: view });
  },
  populate_draft: ({ agent_id, fields }) =>
    log("populate_draft", { agent_id, fields }, { populated: Object.keys(fields).sort() }),
  show_run_progress: ({ run_id }) => log("show_run_progress", { run_id }, { shown: run_id }),
  display_proposed_change: (change) =>
    log("display_proposed_change", change, { displayed: true }),
};
function setState(state) {
  $("gateway-state").textContent = state;
  $("gateway-state").dataset.state = state;
}
window.gatewayConnect = async ({ gateway, token }) => {
  setState("connecting");
  const { connectGateway } = await import(gateway + "/webmcp.js");
  const session = await connectGateway({
    gateway, token, actions, view: () => current, webmcp: true,
    approvalContainer: $("gateway-approvals"),
  });
  session.addEventListener("disconnect", () => setState("disconnected"));
  session.addEventListener("welcome", () => setState("connected"));
  // The shim answers read_view from the page's view itself; it is logged all the same.
  session.addEventListener("request", (event) => {
    if (event.detail.action === "read_view") log("read_view", {}, null);
  });
  window.gatewaySession = session;
  setState("connected");
  return { task_id: session.taskId, tab_id: session.tabId };
};
</script></body></html>"""


def host_app() -> Starlette:
    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    return Starlette(routes=[Route("/", page)])
