"""A task's timeline: its evidence records, in order, as entries a person reads.

Pure: records in (as `Store.evidence_for` returns them, already redacted), entries out.
Nothing here reads the store or renders markup, so the rules of what an entry shows are
tested on plain dictionaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The events of the task browser's guard that say something was refused.
GUARD_REFUSALS = frozenset({"origin_blocked"})
MANIFEST_KIND = "sandbox-manifest/v1"
# A call turned away before it ran, for want of room (the evidence writer or the browser).
SHED_CODES = frozenset({"overloaded"})
# The records that name the task's recording (traces, videos) and its manifest.
CLOSING_KIND = "browser_closed"
RECORDING_KINDS = (CLOSING_KIND, MANIFEST_KIND)


@dataclass
class Entry:
    """One line of a timeline."""

    seq: int
    at: float | None
    # call | ui | browser | approval | refusal | sandbox | recording | event
    category: str
    title: str
    tool: str | None = None
    door: str | None = None
    status: str | None = None
    duration_ms: float | None = None
    error: Mapping[str, Any] | None = None
    input: Any = None
    output: Any = None
    # Artifact ids of the screenshots the call took.
    screenshots: list[str] = field(default_factory=list)
    # An aggregate of many events: how many, over which span, and a few samples.
    aggregate: Mapping[str, Any] | None = None
    # Who answered an approval, and through which channel.
    who: Mapping[str, Any] | None = None
    data: Any = None
    call_id: str | None = None
    # The UI actions a call sent to the task's tab, each with the tab's answer.
    ui_actions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ended_at(self) -> float | None:
        """When it was over: a call's start plus its duration, an event's own time."""
        if self.at is None or self.duration_ms is None:
            return self.at
        return self.at + self.duration_ms / 1000

    def public(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "category": self.category,
            "title": self.title,
            "tool": self.tool,
            "door": self.door,
            "status": self.status,
            "duration_ms": self.duration_ms,
            "error": self.error,
            "input": self.input,
            "output": self.output,
            "screenshots": self.screenshots,
            "aggregate": self.aggregate,
            "who": self.who,
            "data": self.data,
            "call_id": self.call_id,
            "ui_actions": self.ui_actions,
        }


def _call(record: Mapping[str, Any], seq: int) -> Entry:
    tool = str(record.get("tool", ""))
    if tool.startswith("ui."):
        # A UI action sent to the tab; its output is the tab's reply.
        category = "ui"
    elif tool.startswith("browser."):
        category = "browser"
    else:
        category = "call"
    shots: list[str] = []
    context = record.get("context")
    if isinstance(context, Mapping) and isinstance(context.get("screenshot"), str):
        shots.append(context["screenshot"])
    output = record.get("output")
    if isinstance(output, Mapping):
        artifact = output.get("artifact")
        if (
            isinstance(artifact, Mapping)
            and str(artifact.get("media_type", "")).startswith("image/")
            and isinstance(artifact.get("artifact_id"), str)
        ):
            shots.append(artifact["artifact_id"])
    error = record.get("error")
    status = _text(record.get("status"))
    sent: list[dict[str, Any]] = []
    tab = context.get("tab") if isinstance(context, Mapping) else None
    # A ui.* tool notes the one action it sent (its reply is the call's output); a host's
    # tool notes each action it sent, with the tab's answer.
    for item in [tab] if isinstance(tab, Mapping) else tab if isinstance(tab, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("action"), str):
            sent.append(
                {
                    "action": item["action"],
                    "request_id": _text(item.get("request_id")),
                    "status": _text(item.get("status")) or status,
                }
            )
    return Entry(
        seq=seq,
        at=_number(record.get("started_at")),
        category=category,
        title=tool,
        tool=tool,
        door=_text(record.get("door")),
        status=status,
        duration_ms=_number(record.get("duration_ms")),
        error=error if isinstance(error, Mapping) else None,
        input=record.get("input"),
        output=output,
        screenshots=shots,
        data=context if isinstance(context, Mapping) else None,
        call_id=_text(record.get("call_id")),
        ui_actions=sent,
    )


def _event(record: Mapping[str, Any], seq: int) -> Entry:
    kind = str(record.get("kind", "event"))
    raw = record.get("data")
    data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    aggregate = None
    if data.get("aggregate") is True:
        aggregate = {
            "count": data.get("count"),
            "first_at": data.get("first_at"),
            "last_at": data.get("last_at"),
            "samples": data.get("samples") or [],
        }
    entry = Entry(
        seq=seq,
        at=_number(record.get("at")),
        category="event",
        title=kind,
        aggregate=aggregate,
        data=dict(data),
        tool=_text(data.get("tool")),
        door=_text(data.get("door")),
        status=_text(data.get("status")),
        call_id=_text(data.get("call_id")),
    )
    if kind.startswith("approval."):
        entry.category = "approval"
        if kind == "approval.decided":
            approver = data.get("approver")
            entry.who = {
                "approver": approver if isinstance(approver, Mapping) else None,
                "channel": data.get("channel"),
                "decision": data.get("decision"),
                "scope": data.get("scope"),
            }
    elif kind in GUARD_REFUSALS:
        entry.category = "refusal"
        if aggregate is None:
            entry.title = f"{kind}: {data.get('kind', '')} {data.get('target', '')}".strip()
        else:
            entry.title = f"{kind}: {aggregate['count']} more, aggregated"
    elif kind == MANIFEST_KIND or kind.startswith("sandbox."):
        entry.category = "sandbox"
    elif kind == CLOSING_KIND:
        entry.category = "recording"
        refused = data.get("video_refused")
        if isinstance(refused, list) and refused:
            entry.title = f"{kind}: {'; '.join(str(r) for r in refused)}"
    elif aggregate is not None:
        entry.title = f"{kind}: {aggregate['count']} more, aggregated"
    return entry


def entries(records: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """The timeline of a task's evidence records, in the order they were stored."""
    out = []
    for record in records:
        seq = int(record.get("seq", 0))
        if record.get("kind") == "call":
            out.append(_call(record, seq))
        else:
            out.append(_event(record, seq))
    return out


def manifest(records: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The sandbox's manifest, if the task's app was provisioned (the newest one)."""
    found = None
    for record in records:
        if record.get("kind") == MANIFEST_KIND and isinstance(record.get("data"), Mapping):
            found = record["data"]
    return found


def traces(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Playwright traces kept of the task's browser contexts, oldest first."""
    found = []
    for record in records:
        data = record.get("data")
        if record.get("kind") == CLOSING_KIND and isinstance(data, Mapping):
            trace = data.get("trace")
            if isinstance(trace, Mapping) and isinstance(trace.get("artifact_id"), str):
                found.append(trace)
    return found


def videos(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The videos kept of the task's browser pages (`record_video`), oldest first."""
    found = []
    for record in records:
        data = record.get("data")
        if record.get("kind") == CLOSING_KIND and isinstance(data, Mapping):
            for video in data.get("videos") or []:
                if isinstance(video, Mapping) and isinstance(video.get("artifact_id"), str):
                    found.append(video)
    return found


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile: the smallest value at least `fraction` of them reach."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def call_metrics(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a person would chart of one task: calls, by status, shed, and p50/p99 of the
    calls' durations (as the gateway measured them, in milliseconds)."""
    durations: list[float] = []
    by_status: dict[str, int] = {}
    shed = 0
    for record in records:
        if record.get("kind") != "call":
            continue
        status = str(record.get("status"))
        by_status[status] = by_status.get(status, 0) + 1
        error = record.get("error")
        if isinstance(error, Mapping) and error.get("code") in SHED_CODES:
            shed += 1
        duration = _number(record.get("duration_ms"))
        if duration is not None:
            durations.append(duration)
    return {
        "calls": sum(by_status.values()),
        "by_status": by_status,
        "refused": by_status.get("denied", 0),
        "shed": shed,
        "p50_ms": percentile(durations, 0.5),
        "p99_ms": percentile(durations, 0.99),
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
