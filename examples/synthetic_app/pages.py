"""Server-rendered HTML of the dashboard. Every value from data goes through `esc`.

Each page's `<main>` names its view, params and selection in `data-` attributes: the page
script swaps `<main>` in place when the user (or the agent, through `open_view`) moves to
another view, so the assistant panel beside it stays connected.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from examples.synthetic_app.directory import MODELS, ORGS, TOOLS, USERS, User
from examples.synthetic_app.views import PAGE_ACTIONS, VIEWS


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def attr_json(value: object) -> str:
    return esc(json.dumps(value, separators=(",", ":"), sort_keys=True))


@dataclass(frozen=True)
class Chrome:
    """What every page of one app instance shares: who is signed in, where the gateway is."""

    instance: str  # "dashboard" or "sandbox"
    user: User | None
    gateway_url: str | None  # None: this instance has no assistant panel


def layout(
    chrome: Chrome,
    *,
    view: str,
    params: Mapping[str, Any],
    body: str,
    selection: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> str:
    page_title = title or VIEWS.get(view, (None, view))[1]
    user = chrome.user
    nav = ""
    if user is not None:
        org = ORGS[user.org_id]
        nav = f"""
  <nav aria-label="Sections">
    <a href="/agents" data-nav>Agents</a>
    <a href="/suites" data-nav>Suites</a>
    <a href="/runs" data-nav>Runs</a>{
            '<a href="/admin/approvals" data-testid="admin-approvals">Approvals</a>'
            if user.role == "admin"
            else ""
        }
  </nav>
  <div class="who" data-testid="who">
    <span data-testid="user-name">{esc(user.name)}</span>
    <span class="role" data-testid="user-role">{esc(user.role)}</span>
    <span class="org" data-testid="org-name">{esc(org.name)}</span>
    <form method="post" action="/signout"><button type="submit">Sign out</button></form>
  </div>"""
    banner = (
        '<p class="banner">Sandbox instance: the task browser works here, on its own records.</p>'
        if chrome.instance == "sandbox"
        else ""
    )
    panel = ""
    if chrome.gateway_url and user is not None:
        panel = ASSISTANT_PANEL
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(page_title)} · Synthetic dashboard</title>
<link rel="stylesheet" href="/static/app.css">
<script type="module" src="/static/app.js"></script>
</head>
<body data-instance="{esc(chrome.instance)}" data-gateway="{esc(chrome.gateway_url or "")}">
<header class="top">
  <a class="brand" href="/agents" data-nav>Synthetic dashboard</a>{nav}
</header>
{banner}
<div class="layout">
<main id="view" data-view="{esc(view)}" data-params="{attr_json(dict(params))}"
      data-selection="{attr_json(dict(selection or {}))}"
      data-actions="{attr_json(list(PAGE_ACTIONS))}" data-title="{esc(page_title)}">
{body}
</main>
{panel}
</div>
</body>
</html>
"""


ASSISTANT_PANEL = """
<aside id="assistant" class="assistant" aria-label="Assistant" data-state="closed">
  <div class="assistant-head">
    <h2>Assistant</h2>
    <span class="status" data-testid="assistant-status">closed</span>
  </div>
  <button type="button" id="assistant-open" data-testid="assistant-open">Open assistant</button>
  <p class="task" data-testid="assistant-task" hidden></p>
  <section class="proposal" data-testid="assistant-proposal" hidden>
    <h3 class="proposal-title"></h3>
    <p class="proposal-summary"></p>
    <pre class="proposal-diff"></pre>
  </section>
  <section class="approvals" id="assistant-approvals" data-testid="assistant-approvals"></section>
  <section class="progress" data-testid="assistant-progress"></section>
  <h3>Actions</h3>
  <ol class="log" data-testid="assistant-log"></ol>
</aside>
"""


def signin_page(chrome: Chrome, message: str | None = None) -> str:
    rows = "\n".join(
        f"""<li><form method="post" action="/signin">
  <input type="hidden" name="user_id" value="{esc(u.id)}">
  <button type="submit" data-testid="signin-{esc(u.id)}">{esc(u.name)}</button>
  <span class="role">{esc(u.role)}</span> of <span class="org">{esc(ORGS[u.org_id].name)}</span>
</form></li>"""
        for u in USERS.values()
    )
    note = f'<p class="error">{esc(message)}</p>' if message else ""
    body = f"""<h1>Sign in</h1>
{note}
<p>Pick a synthetic user. There are no passwords: this is a local example.</p>
<ul class="users">{rows}</ul>"""
    return layout(chrome, view="signin", params={}, body=body, title="Sign in")


def agents_page(chrome: Chrome, agents: Sequence[Mapping[str, Any]]) -> str:
    rows = "\n".join(
        f"""<tr data-agent-id="{esc(a["id"])}">
  <td><a href="/agents/{esc(a["id"])}" data-nav>{esc(a["name"])}</a></td>
  <td>{esc(f"v{a['version']}" if a["version"] else "never saved")}</td>
  <td>{"unsaved draft" if a["has_draft"] else ""}</td>
</tr>"""
        for a in agents
    )
    body = f"""<h1>Agents</h1>
<p><a href="/agents/new" data-nav data-testid="new-agent">New agent</a></p>
<table data-testid="agents"><thead><tr><th>Agent</th><th>Version</th><th>Draft</th></tr></thead>
<tbody>{rows}</tbody></table>"""
    return layout(chrome, view="agents", params={}, body=body)


def builder_page(chrome: Chrome, agent: Mapping[str, Any] | None, *, can_save: bool) -> str:
    """The agent builder: the draft if there is one, else the current version."""
    draft = agent["draft"] if agent else None
    current = agent["current_version"] if agent else None
    shown = draft or current or {"name": "", "instructions": "", "model": "sim-small", "tools": []}
    agent_id = agent["id"] if agent else None
    action = f"/agents/{agent_id}" if agent_id else "/agents/new"
    models = "".join(
        f'<option value="{esc(m)}"{" selected" if m == shown["model"] else ""}>{esc(m)}</option>'
        for m in MODELS
    )
    tools = "".join(
        f"""<label><input type="checkbox" name="tools" value="{esc(tool)}"
  data-testid="tool-{esc(tool)}"{" checked" if tool in shown["tools"] else ""}>
  {esc(tool)}</label>"""
        for tool in TOOLS
    )
    version_line = (
        f"""<p data-testid="current-version" data-version-id="{esc(current["id"])}">
  Saved version <strong>v{esc(current["number"])}</strong>
  <code>{esc(current["id"])}</code></p>"""
        if current
        else '<p data-testid="current-version">Never saved.</p>'
    )
    draft_line = (
        f'<p class="draft-state" data-testid="draft-state" data-draft="unsaved">'
        f"Unsaved draft, last edited by {esc(draft['updated_by'])}.</p>"
        if draft
        else '<p class="draft-state" data-testid="draft-state" data-draft="none">'
        "No unsaved draft.</p>"
    )
    save_button = (
        f"""<form method="post" action="{esc(action)}/save" data-nav-form>
  <button type="submit" data-testid="save-version"{"" if draft else " disabled"}>
    Save as new version</button></form>"""
        if agent_id and can_save
        else ('<p class="muted">Only an admin can save a version.</p>' if agent_id else "")
    )
    versions = ""
    if agent and agent["versions"]:
        versions = (
            "<h2>Versions</h2><ol reversed>"
            + "".join(
                f"<li><code>{esc(v['id'])}</code> v{esc(v['number'])} · {esc(v['model'])} · "
                f"by {esc(v['created_by'])}</li>"
                for v in agent["versions"]
            )
            + "</ol>"
        )
    body = f"""<h1 data-testid="builder-title">{esc(agent["name"] if agent else "New agent")}</h1>
{version_line}
{draft_line}
<p class="assistant-note" data-testid="populated-note" hidden>Filled in by the assistant.</p>
<form method="post" action="{esc(action)}/draft" class="builder" data-nav-form
      data-testid="builder-form">
  <label>Name <input name="name" data-testid="draft-name" value="{esc(shown["name"])}"
    maxlength="120" required></label>
  <label>Instructions <textarea name="instructions" rows="8" maxlength="8000"
    data-testid="draft-instructions">{esc(shown["instructions"])}</textarea></label>
  <label>Model <select name="model" data-testid="draft-model">{models}</select></label>
  <fieldset><legend>Tools</legend>{tools}</fieldset>
  <button type="submit" data-testid="save-draft">Save draft</button>
</form>
{save_button}
{versions}"""
    return layout(
        chrome,
        view="agent_builder",
        params={"agent_id": agent_id} if agent_id else {},
        selection={"agent_id": agent_id} if agent_id else {},
        body=body,
    )


def suites_page(chrome: Chrome, suites: Iterable[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"""<li data-suite-id="{esc(s["id"])}"><a href="/suites/{esc(s["id"])}" data-nav>
  {esc(s["name"])}</a> · {esc(s["scenarios"])} scenarios<br>
  <span class="muted">{esc(s["description"])}</span></li>"""
        for s in suites
    )
    body = f'<h1>Evaluation suites</h1><ul class="cards" data-testid="suites">{rows}</ul>'
    return layout(chrome, view="suites", params={}, body=body)


def suite_page(
    chrome: Chrome, suite: Mapping[str, Any], agents: Sequence[Mapping[str, Any]]
) -> str:
    scenarios = "".join(
        f"""<li><label><input type="checkbox" name="scenario_ids" value="{esc(s["id"])}" checked>
  {esc(s["name"])}</label> <span class="muted">{esc(s["prompt"])}</span>
  {f'<span class="tag">needs {esc(s["provider"])}</span>' if s["provider"] else ""}</li>"""
        for s in suite["scenarios"]
    )
    options = "".join(
        f'<option value="{esc(a["id"])}">{esc(a["name"])}</option>'
        for a in agents
        if a["current_version_id"]
    )
    body = f"""<h1>{esc(suite["name"])}</h1>
<p>{esc(suite["description"])}</p>
<form method="post" action="/suites/{esc(suite["id"])}/runs" data-nav-form
      data-testid="run-form">
  <label>Agent <select name="agent_id">{options}</select></label>
  <ul class="scenarios" data-testid="scenarios">{scenarios}</ul>
  <label>Token budget per scenario
    <input type="number" name="max_tokens" value="2000" min="100" max="20000"></label>
  <button type="submit">Start evaluation</button>
</form>"""
    return layout(
        chrome,
        view="suite",
        params={"suite_id": suite["id"]},
        selection={"suite_id": suite["id"]},
        body=body,
    )


def runs_page(chrome: Chrome, runs: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"""<tr data-run-id="{esc(r["run_id"])}"><td><a href="/runs/{esc(r["run_id"])}" data-nav>
  <code>{esc(r["run_id"])}</code></a></td><td class="state-{esc(r["state"])}">{esc(r["state"])}</td>
  <td>{esc(_counts_text(r["counts"]))}</td></tr>"""
        for r in runs
    )
    body = f"""<h1>Evaluation runs</h1>
<table data-testid="runs"><thead><tr><th>Run</th><th>State</th><th>Scenarios</th></tr></thead>
<tbody>{rows}</tbody></table>"""
    return layout(chrome, view="runs", params={}, body=body)


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items() if n)


def scenario_rows(scenarios: Iterable[Mapping[str, Any]]) -> str:
    return "".join(
        f"""<tr data-scenario-id="{esc(s["scenario_id"])}" data-state="{esc(s["state"])}">
  <td>{esc(s["name"])}</td><td class="state-{esc(s["state"])}">{esc(s["state"])}</td>
  <td>{esc(s["reason"] or "")}</td><td>{esc(s["detail"] or "")}</td></tr>"""
        for s in scenarios
    )


def run_page(chrome: Chrome, run: Mapping[str, Any]) -> str:
    report_link = (
        f'<p><a href="/reports/{esc(run["run_id"])}" data-nav data-testid="report-link">'
        "Open the report</a></p>"
        if run["terminal"]
        else ""
    )
    body = f"""<h1>Run <code>{esc(run["run_id"])}</code></h1>
<p>State: <strong data-testid="run-state" data-run-id="{esc(run["run_id"])}"
  class="state-{esc(run["state"])}">{esc(run["state"])}</strong>
  · budget {esc(run["budget"]["max_tokens"])} tokens per scenario</p>
{report_link}
<table data-testid="run-scenarios" data-live-run="{esc(run["run_id"])}">
<thead><tr><th>Scenario</th><th>State</th><th>Reason</th><th>Detail</th></tr></thead>
<tbody>{scenario_rows(run["scenarios"])}</tbody></table>"""
    return layout(
        chrome,
        view="run",
        params={"run_id": run["run_id"]},
        selection={"run_id": run["run_id"], "agent_id": run["agent_id"]},
        body=body,
    )


def report_page(chrome: Chrome, report: Mapping[str, Any]) -> str:
    run = report["run"]
    counts = run["counts"]
    body = f"""<h1>Report <code data-testid="report-id">{esc(report["report_id"])}</code></h1>
<section class="report" data-testid="report" data-run-id="{esc(run["run_id"])}"
         data-run-state="{esc(run["state"])}">
<p>Run <code>{esc(run["run_id"])}</code> ended <strong class="state-{esc(run["state"])}"
  data-testid="report-state">{esc(run["state"])}</strong>{
        f": {esc(run['error'])}" if run["error"] else ""
    }.</p>
<ul class="counts">
  <li data-testid="count-passed">{esc(counts["passed"])} passed</li>
  <li data-testid="count-failed">{esc(counts["failed"])} incorrect or over budget</li>
  <li data-testid="count-provider-error">{
        esc(counts["provider_error"])
    } provider setup error(s)</li>
</ul>
<table data-testid="report-scenarios">
<thead><tr><th>Scenario</th><th>Verdict</th><th>Reason</th><th>Detail</th></tr></thead>
<tbody>{scenario_rows(run["scenarios"])}</tbody></table>
</section>"""
    return layout(
        chrome,
        view="report",
        params={"run_id": run["run_id"]},
        selection={"run_id": run["run_id"], "report_id": report["report_id"]},
        body=body,
    )


def approvals_page(chrome: Chrome, pending: Sequence[Mapping[str, Any]]) -> str:
    """The admin page: what the organization's assistants wait for an admin to decide."""
    rows = "\n".join(
        f"""<tr data-approval-id="{esc(a["approval_id"])}">
  <td>{esc(a["user_id"])}</td><td><code>{esc(a["tool"])}</code></td>
  <td>{esc(a["summary"])}</td>
  <td><form method="post" action="/admin/approvals/{esc(a["task_id"])}/{esc(a["approval_id"])}">
    <button name="decision" value="approve"
            data-testid="approve-{esc(a["approval_id"])}">Approve</button>
    <button name="decision" value="deny" data-testid="deny-{esc(a["approval_id"])}">Deny</button>
  </form></td>
</tr>"""
        for a in pending
    )
    empty = "" if pending else '<p data-testid="no-approvals">Nothing waits for a decision.</p>'
    body = f"""<h1>Approvals</h1>
<p>What your organization's assistants asked an admin to approve.</p>{empty}
<table data-testid="approvals"><thead><tr><th>Asked for</th><th>Tool</th><th>What</th>
<th>Decision</th></tr></thead><tbody>{rows}</tbody></table>"""
    return layout(chrome, view="approvals", params={}, body=body, title="Approvals")


def error_page(chrome: Chrome, status: int, message: str) -> str:
    body = f'<h1>{esc(status)}</h1><p class="error" data-testid="error">{esc(message)}</p>'
    return layout(chrome, view="error", params={}, body=body, title="Error")
