"""The console's pages as HTML, rendered on the server: the frame of every page, the
sign-in page, the list of tasks, a task, one approval, and the timeline of an exported
archive (with its own links and its style inlined).

Every value that comes from a task is escaped by `gateway/console/markup.py`'s `e`; the
fragments the pages are made of are in `entries_html.py` (the timeline) and `cards.py`
(approvals, metrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from gateway.console.cards import approval_card, metrics_html
from gateway.console.entries_html import entries_html
from gateway.console.links import BASE, STATIC, Links, console_links, video_link
from gateway.console.markup import as_json, e, when
from gateway.console.timeline import Entry
from gateway.core.results import Door

STATUSES = ("active", "ended", "expired")
DOORS = tuple(door.value for door in Door)
NOTHING_ASKED = '<p class="empty" data-empty>Nothing asked yet.</p>'


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


# -- an approval, a task, its archive ---------------------------------------------


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
