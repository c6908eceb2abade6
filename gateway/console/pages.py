"""The console's pages as HTML, rendered on the server.

Every value that comes from a task (a tool's input, a page's title, an approval's summary)
is escaped here and nowhere else: the page's script only inserts fragments this module
rendered, so a hostile string is shown as text. The same renderer makes the timeline of an
exported archive, with its own links (`Links`) and its style inlined.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from gateway.console.timeline import Entry
from gateway.core.results import Door

STATIC = Path(__file__).resolve().parent / "static"
BASE = "/console"
STATUSES = ("active", "ended", "expired")
DOORS = tuple(door.value for door in Door)
# Who may answer a request, by its `by`: the control plane answers any of them.
ASKED_OF = {
    "actor": "the task's own user, or the control plane",
    "control": "the control plane only",
}
NOTHING_ASKED = '<p class="empty" data-empty>Nothing asked yet.</p>'


def e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(at: float | None) -> str:
    if at is None:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} ms"


@dataclass(frozen=True)
class Links:
    """Where a rendered timeline's pictures are: the console's routes, or an archive's files."""

    artifact: Callable[[str], str]


def console_links(task_id: str) -> Links:
    tid = quote(task_id, safe="")
    return Links(
        artifact=lambda art: f"{BASE}/tasks/{tid}/artifacts/{quote(art, safe='')}",
    )


def video_link(task_id: str, artifact_id: str) -> str:
    """Where the console serves a video of the task browser."""
    tid, art = quote(task_id, safe=""), quote(artifact_id, safe="")
    return f"{BASE}/tasks/{tid}/videos/{art}/video.webm"


def layout(title: str, body: str, *, viewer: str = "", csrf: str = "", page: str = "") -> str:
    signed = (
        f'<span class="viewer" data-testid="viewer">{e(viewer)}</span>'
        f'<form method="post" action="{BASE}/sign-out"><input type="hidden" name="csrf" '
        f'value="{e(csrf)}"><button type="submit" class="quiet">Sign out</button></form>'
        if viewer
        else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · Gateway console</title>"
        f'<meta name="console-csrf" content="{e(csrf)}">'
        f'<link rel="stylesheet" href="{BASE}/static/console.css">'
        f'<script type="module" src="{BASE}/static/console.js"></script>'
        f'</head><body data-page="{e(page)}"><header class="bar">'
        f'<a class="brand" href="{BASE}">Gateway console</a>{signed}</header>'
        f"<main>{body}</main></body></html>"
    )


def sign_in_page(error: str = "", host_url: str | None = None) -> str:
    problem = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    host = f'<p>Or <a href="{e(host_url)}">sign in with your account</a>.</p>' if host_url else ""
    body = (
        '<section class="signin"><h1>Sign in</h1>'
        "<p>The console shows every task of this gateway. Present the control-plane key "
        "(its file is printed when the gateway starts).</p>"
        f"{problem}"
        f'<form method="post" action="{BASE}/sign-in">'
        '<label for="key">Control key</label>'
        '<input id="key" name="key" type="password" autocomplete="off" required autofocus>'
        '<button type="submit">Sign in</button></form>'
        f"{host}</section>"
    )
    return layout("Sign in", body, page="sign-in")


# -- the list of tasks ---------------------------------------------------------------


def _select(name: str, options: Sequence[str], chosen: str | None) -> str:
    items = ['<option value="">any</option>'] + [
        f'<option value="{e(o)}"{" selected" if o == chosen else ""}>{e(o)}</option>'
        for o in options
    ]
    return f'<select name="{name}" id="f-{name}">{"".join(items)}</select>'


def task_row(task: Mapping[str, Any]) -> str:
    tid = str(task["task_id"])
    tally = task["tally"]
    doors = ", ".join(task.get("doors") or [])
    return (
        f'<tr data-task-id="{e(tid)}" data-status="{e(task["status"])}">'
        f'<td><a href="{BASE}/tasks/{quote(tid, safe="")}">{e(tid)}</a></td>'
        f"<td>{e(task['org_id'])}</td><td>{e(task['actor'])}</td>"
        f'<td><span class="status s-{e(task["status"])}" data-field="status">'
        f"{e(task['status'])}</span></td>"
        f"<td>{e(doors)}</td><td>{e(when(task['created_at']))}</td>"
        f'<td class="num" data-count="calls">{tally["calls"]}</td>'
        f'<td class="num" data-count="refused">{tally["refused"]}</td>'
        f'<td class="num" data-count="pending_approvals">{tally["pending_approvals"]}</td>'
        "</tr>"
    )


def tasks_page(
    tasks: Iterable[Mapping[str, Any]],
    filters: Mapping[str, str | None],
    *,
    viewer: str,
    csrf: str,
) -> str:
    query = urlencode({k: v for k, v in filters.items() if v})
    rows = "".join(task_row(t) for t in tasks)
    empty = "" if rows else '<p class="empty">No task matches.</p>'
    body = (
        "<h1>Tasks</h1>"
        f'<form class="filters" method="get" action="{BASE}" data-testid="filters">'
        f'<label>Organization <input name="org" id="f-org" value="{e(filters.get("org"))}"></label>'
        f'<label>Actor <input name="actor" id="f-actor" value="{e(filters.get("actor"))}"></label>'
        f"<label>Status {_select('status', STATUSES, filters.get('status'))}</label>"
        f"<label>Door {_select('door', DOORS, filters.get('door'))}</label>"
        '<button type="submit">Filter</button></form>'
        '<p class="live" data-testid="live-note" hidden></p>'
        f'<table class="tasks" data-testid="tasks" data-query="{e(query)}"><thead><tr>'
        "<th>Task</th><th>Organization</th><th>Actor</th><th>Status</th><th>Doors</th>"
        '<th>Created</th><th class="num">Calls</th><th class="num">Refused</th>'
        '<th class="num">Pending approvals</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>{empty}"
    )
    return layout("Tasks", body, viewer=viewer, csrf=csrf, page="tasks")


# -- a task --------------------------------------------------------------------------


def _details(label: str, value: Any) -> str:
    if value is None or value == {} or value == []:
        return ""
    return f"<details><summary>{e(label)}</summary><pre>{e(as_json(value))}</pre></details>"


def entry_html(entry: Entry, links: Links, start: float | None) -> str:
    offset = ""
    ended = entry.ended_at
    if ended is not None and start is not None:
        # Records are in the order they were stored, which for a call is when it ended (its
        # approval's records come before it): the offset shown is that moment.
        offset = f"+{ended - start:.2f} s"
    facts = []
    if entry.door:
        facts.append(f'<span class="door" data-field="door">{e(entry.door)}</span>')
    if entry.status:
        facts.append(f'<span class="status s-{e(entry.status)}">{e(entry.status)}</span>')
    if entry.duration_ms is not None:
        facts.append(f'<span class="duration">{e(ms(entry.duration_ms))}</span>')
    if entry.error:
        code = entry.error.get("code", "")
        facts.append(f'<span class="error-code">{e(code)}</span>')
    body = []
    if entry.error and entry.error.get("message"):
        body.append(f'<p class="error-message">{e(entry.error.get("message"))}</p>')
    if entry.who:
        approver = entry.who.get("approver") or {}
        body.append(
            f'<p class="who" data-testid="approval-who">{e(entry.who.get("decision"))} '
            f"(scope {e(entry.who.get('scope'))}) by {e(approver.get('id'))} "
            f"({e(approver.get('role'))}) through {e(entry.who.get('channel'))}</p>"
        )
    if entry.aggregate:
        agg = entry.aggregate
        body.append(
            f'<p class="aggregate" data-testid="aggregate">aggregate of {e(agg.get("count"))} '
            f"events from {e(when(agg.get('first_at')))} to {e(when(agg.get('last_at')))}, "
            f"{len(agg.get('samples') or [])} kept as samples</p>"
        )
    if entry.ui_actions:
        sent = "".join(
            f'<li data-ui-action="{e(a["action"])}" data-outcome="{e(a["status"])}">'
            f"to the tab: <code>{e(a['action'])}</code> "
            f'<span class="status s-{e(a["status"])}">{e(a["status"])}</span></li>'
            for a in entry.ui_actions
        )
        body.append(f'<ul class="ui-actions" data-testid="ui-actions">{sent}</ul>')
    for shot in entry.screenshots:
        url = links.artifact(shot)
        body.append(
            f'<a class="shot" href="{e(url)}"><img src="{e(url)}" loading="lazy" '
            f'alt="screenshot taken by {e(entry.tool)}" data-artifact="{e(shot)}"></a>'
        )
    if entry.category in ("call", "ui", "browser"):
        label = "reply of the tab" if entry.category == "ui" else "output"
        body.append(_details("input", entry.input))
        body.append(_details(label, entry.output))
        body.append(_details("context", entry.data))
    else:
        body.append(_details("data", entry.data))
    return (
        f'<li class="entry c-{e(entry.category)}" data-seq="{entry.seq}" '
        f'data-category="{e(entry.category)}" data-tool="{e(entry.tool or "")}" '
        f'data-status="{e(entry.status or "")}">'
        f'<div class="line"><span class="at" title="{e(_span(entry))}">{e(offset)}</span>'
        f'<span class="category">{e(entry.category)}</span>'
        f'<span class="title">{e(entry.title)}</span>{"".join(facts)}</div>'
        f"{''.join(body)}</li>"
    )


def _span(entry: Entry) -> str:
    if entry.duration_ms is None:
        return when(entry.at)
    return f"started {when(entry.at)}, took {ms(entry.duration_ms)}"


def entries_html(entries: Iterable[Entry], links: Links, start: float | None) -> str:
    return "".join(entry_html(item, links, start) for item in entries)


def approval_card(approval: Mapping[str, Any]) -> str:
    """A pending approval with what it would approve first, then the answer's controls."""
    aid = str(approval.get("approval_id", ""))
    tool = str(approval.get("tool", ""))
    status = str(approval.get("status", ""))
    decision = approval.get("decision") or {}
    approver = decision.get("approver") or {} if isinstance(decision, Mapping) else {}
    outcome = (
        f"{status} by {approver.get('id', '')} through {decision.get('channel', '')}"
        if status != "pending" and isinstance(decision, Mapping) and decision
        else status
    )
    controls = (
        '<fieldset class="answer" disabled>'
        "<legend>Answer</legend>"
        f'<label><input type="radio" name="scope-{e(aid)}" value="call" checked> '
        "this call only</label>"
        f'<label><input type="radio" name="scope-{e(aid)}" value="task"> '
        f"{e(tool)} for the rest of the task</label>"
        '<div class="buttons">'
        f'<button type="button" class="approve" data-decision="approve">Approve {e(tool)}</button>'
        f'<button type="button" class="deny" data-decision="deny">Deny</button>'
        "</div>"
        '<p class="arming" aria-live="polite">Read what it approves; the buttons take an '
        "answer once this card has stayed in view, still, for a moment.</p>"
        "</fieldset>"
        if status == "pending"
        else ""
    )
    return (
        f'<section class="approval" data-approval-id="{e(aid)}" data-state="{e(status)}" '
        f'data-testid="approval-{e(aid)}">'
        f"<h3>{e(tool)} <span class='status s-{e(status)}' data-field='outcome'>"
        f"{e(outcome)}</span></h3>"
        f'<p class="summary">{e(approval.get("summary"))}</p>'
        "<dl>"
        f"<dt>call</dt><dd>{e(approval.get('call_id'))}</dd>"
        f"<dt>door</dt><dd>{e(approval.get('door'))}</dd>"
        f"<dt>answered by</dt><dd>{e(ASKED_OF.get(str(approval.get('by')), approval.get('by')))}"
        "</dd>"
        f"<dt>input sha256</dt><dd class='digest'>{e(approval.get('input_sha256'))}</dd>"
        f"<dt>expires</dt><dd>{e(when(approval.get('expires_at')))}</dd>"
        "</dl>"
        f"{_details('details', approval.get('details'))}"
        f"{controls}</section>"
    )


def approval_page(approval: Mapping[str, Any], task_id: str, *, viewer: str, csrf: str) -> str:
    """One approval on a page of its own: where a link given to an agent's client leads.
    The same card, armed by the same rule, as on the task's page."""
    body = (
        f'<article class="approval-page" data-task-id="{e(task_id)}">'
        f"<h1>Approval asked by task {e(task_id)}</h1>"
        "<p>An agent's call waits for this answer. Check what it would approve; the agent "
        "cannot answer it, and one answer, the first, counts.</p>"
        f"{approval_card(approval)}"
        f'<p><a href="{BASE}/tasks/{quote(task_id, safe="")}">The whole task</a></p>'
        "</article>"
    )
    return layout("Approval", body, viewer=viewer, csrf=csrf, page="approval")


def metrics_html(metrics: Mapping[str, Any], pending: int) -> str:
    cells = [
        ("calls", metrics["calls"]),
        ("refused", metrics["refused"]),
        ("shed", metrics["shed"]),
        ("pending_approvals", pending),
        ("p50", ms(metrics["p50_ms"])),
        ("p99", ms(metrics["p99_ms"])),
    ]
    labels = {"pending_approvals": "pending approvals"}
    return "".join(
        f'<div class="metric"><span class="value" data-metric="{name}">{e(value)}</span>'
        f'<span class="label">{e(labels.get(name, name))}</span></div>'
        for name, value in cells
    )


def task_page(
    task: Mapping[str, Any],
    entries: Sequence[Entry],
    *,
    metrics: Mapping[str, Any],
    approvals: Sequence[Mapping[str, Any]],
    traces: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any] | None,
    last_seq: int,
    videos: Sequence[Mapping[str, Any]] = (),
    viewer: str,
    csrf: str,
    origin: float | None = None,
    older_before: int | None = None,
    newer_after: int | None = None,
) -> str:
    tid = str(task["task_id"])
    tq = quote(tid, safe="")
    links = console_links(tid)
    # Offsets are from the task's first record, whichever page this is.
    start = origin if origin is not None else (entries[0].at if entries else None)
    pending = [a for a in approvals if a.get("status") == "pending"]
    facts = (
        "<dl class='facts'>"
        f"<dt>organization</dt><dd data-testid='task-org'>{e(task['org_id'])}</dd>"
        f"<dt>actor</dt><dd>{e(task['actor']['id'])} ({e(task['actor']['role'])})</dd>"
        f"<dt>status</dt><dd><span class='status s-{e(task['status'])}' "
        f"data-testid='task-status'>{e(task['status'])}</span></dd>"
        f"<dt>scopes</dt><dd>{e(', '.join(task['scopes']))}</dd>"
        f"<dt>created</dt><dd>{e(task['created_at'])}</dd>"
        f"<dt>expires</dt><dd>{e(task['expires_at'])}</dd>"
        f"<dt>app</dt><dd>{e(task['sandbox'].get('app_origin'))}</dd>"
        "</dl>"
    )
    approvals_html = "".join(approval_card(a) for a in approvals)
    recording_items = []
    for trace in traces:
        art = str(trace["artifact_id"])
        trace_url = f"{BASE}/tasks/{tq}/traces/{quote(art, safe='')}/trace.zip"
        viewer_url = f"{BASE}/trace-viewer/index.html?" + urlencode({"trace": trace_url})
        recording_items.append(
            f'<li><a href="{e(viewer_url)}" target="_blank" rel="noopener" '
            f'data-testid="open-trace">Open the trace in the viewer</a> '
            f'· <a href="{e(trace_url)}" download>download trace.zip</a> '
            f"({int(trace.get('size', 0)) // 1024} KiB)</li>"
        )
    for video in videos:
        video_url = video_link(tid, str(video["artifact_id"]))
        recording_items.append(
            f'<li><video controls preload="metadata" src="{e(video_url)}" '
            f'data-testid="video" data-artifact="{e(video["artifact_id"])}"></video>'
            f'<br><a href="{e(video_url)}" download>download video.webm</a> '
            f"({int(video.get('size', 0)) // 1024} KiB)</li>"
        )
    recording = (
        f"<ul class='recording'>{''.join(recording_items)}</ul>"
        if recording_items
        else "<p class='empty'>No recording yet: the task browser's trace (with "
        "GATEWAY_BROWSER_TRACE on) and its video (for a task created with record_video) "
        "are kept when its context closes (the task ends or idles).</p>"
    )
    manifest_html = (
        f"<pre data-testid='manifest'>{e(as_json(manifest))}</pre>"
        if manifest
        else "<p class='empty'>The task's app was not provisioned by the gateway.</p>"
    )
    pager = _pager(tid, older_before, newer_after)
    body = (
        f'<article class="task" data-task-id="{e(tid)}" data-last-seq="{last_seq}" '
        f'data-follow="{"false" if newer_after is not None else "true"}">'
        f"<h1>Task <code>{e(tid)}</code></h1>{facts}"
        f'<section class="metrics" data-testid="metrics">{metrics_html(metrics, len(pending))}'
        "</section>"
        '<h2>Approvals</h2><div class="approvals" data-testid="approvals">'
        f"{approvals_html or NOTHING_ASKED}</div>"
        '<div class="side"><section><h2>Recording</h2>'
        f"{recording}</section>"
        f'<section><h2>Export</h2><p><a href="{BASE}/tasks/{tq}/export.zip" '
        'data-testid="export">Download the task as one archive</a> (timeline as JSON and '
        "HTML, screenshots, traces, manifest).</p></section>"
        f"<section><h2>Sandbox manifest</h2>{manifest_html}</section></div>"
        f'<h2>Timeline</h2>{pager}<ol class="timeline" data-testid="timeline">'
        f"{entries_html(entries, links, start)}</ol>{pager}</article>"
    )
    return layout(f"Task {tid}", body, viewer=viewer, csrf=csrf, page="task")


def _pager(task_id: str, older_before: int | None, newer_after: int | None) -> str:
    """Links to the pages of the timeline around this one, by their cursors."""
    if older_before is None and newer_after is None:
        return ""
    here = f"{BASE}/tasks/{quote(task_id, safe='')}"
    links = []
    if older_before is not None:
        links.append(
            f'<a href="{e(here)}?before={older_before}" rel="prev" data-testid="older">'
            "older records</a>"
        )
    if newer_after is not None:
        links.append(
            f'<a href="{e(here)}?after={newer_after}" rel="next" data-testid="newer">'
            "newer records</a>"
        )
    return f'<nav class="pager">{" · ".join(links)}</nav>'


def archive_timeline(
    task: Mapping[str, Any],
    entries: Sequence[Entry],
    *,
    metrics: Mapping[str, Any],
    approvals: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any] | None,
    shots: Mapping[str, str],
) -> str:
    """The timeline as one HTML file of an export, its screenshots beside it."""
    links = Links(artifact=lambda art: shots.get(art, ""))
    start = entries[0].at if entries else None
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    cards = "".join(approval_card(a) for a in approvals)
    pending = sum(1 for a in approvals if a.get("status") == "pending")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Task {e(task['task_id'])}</title><style>{style}</style></head><body>"
        f"<main><h1>Task <code>{e(task['task_id'])}</code></h1>"
        f"<pre>{e(as_json(task))}</pre>"
        f'<section class="metrics">{metrics_html(metrics, pending)}</section>'
        f"<h2>Approvals</h2>{cards}"
        f"<h2>Sandbox manifest</h2><pre>{e(as_json(manifest))}</pre>"
        f'<h2>Timeline</h2><ol class="timeline">{entries_html(entries, links, start)}</ol>'
        "</main></body></html>"
    )
