"""The entries of a task's timeline as HTML: one `<li>` each, with what it did, its
outcome, its pictures and its data folded away."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.console.links import Links
from gateway.console.markup import details, e, ms, when
from gateway.console.timeline import Entry


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
        body.append(details("input", entry.input))
        body.append(details(label, entry.output))
        body.append(details("context", entry.data))
    else:
        body.append(details("data", entry.data))
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
