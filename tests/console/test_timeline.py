"""What a timeline entry shows of an evidence record, on plain dictionaries."""

from __future__ import annotations

from typing import Any

from gateway.console import timeline
from gateway.console.entries_html import entries_html
from gateway.console.links import console_links


def call(seq: int, tool: str, **extra: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": "call",
        "call_id": f"call_{seq}",
        "tool": tool,
        "door": "mcp",
        "status": "succeeded",
        "input": {},
        "output": {},
        "started_at": 100.0 + seq,
        "duration_ms": 10.0 * seq,
        **extra,
    }


def event(seq: int, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": 100.0 + seq, "data": data}


def test_calls_are_told_apart_by_what_they_reach() -> None:
    found = timeline.entries(
        [
            call(1, "ui.open_view", context={"tab": {"request_id": "r1", "action": "open_view"}}),
            call(2, "browser.click", context={"screenshot": "art_1"}),
            call(
                3,
                "agents.save_draft",
                context={
                    "tab": [
                        {"request_id": "r2", "action": "populate_draft", "status": "succeeded"},
                        {"request_id": "r3", "action": "open_view", "status": "timeout"},
                    ]
                },
            ),
        ]
    )
    assert [e.category for e in found] == ["ui", "browser", "call"]
    assert [a["action"] for a in found[0].ui_actions] == ["open_view"]
    # A ui.* tool's one action has the call's own outcome.
    assert found[0].ui_actions[0]["status"] == "succeeded"
    assert [(a["action"], a["status"]) for a in found[2].ui_actions] == [
        ("populate_draft", "succeeded"),
        ("open_view", "timeout"),
    ]
    assert found[1].screenshots == ["art_1"]
    assert found[2].ended_at == 103.0 + 0.03


def test_a_screenshot_call_shows_its_picture_and_other_artifacts_are_not_pictures() -> None:
    picture = {"artifact_id": "art_png", "media_type": "image/png", "name": "screenshot.png"}
    archive = {"artifact_id": "art_zip", "media_type": "application/zip", "name": "data.zip"}
    found = timeline.entries(
        [
            call(1, "browser.screenshot", output={"artifact": picture}),
            call(2, "sandbox.keep", output={"artifact": archive}),
        ]
    )
    assert found[0].screenshots == ["art_png"]
    assert found[1].screenshots == []


def test_guard_refusals_and_other_floods_are_shown_as_aggregates() -> None:
    one = {"kind": "navigation_refused", "target": "http://evil.test", "denies": True}
    many = {"aggregate": True, "count": 41, "first_at": 1.0, "last_at": 2.0, "samples": [one]}
    found = timeline.entries(
        [
            event(1, "origin_blocked", one),
            event(2, "origin_blocked", many),
            event(3, "tab.frame_rejected", many),
        ]
    )
    assert [e.category for e in found] == ["refusal", "refusal", "event"]
    assert "http://evil.test" in found[0].title
    assert found[0].aggregate is None
    assert found[1].aggregate == {"count": 41, "first_at": 1.0, "last_at": 2.0, "samples": [one]}
    assert "41 more, aggregated" in found[1].title
    assert "41 more, aggregated" in found[2].title
    html = entries_html(found, console_links("task_1"), 100.0)
    assert "aggregate of 41 events" in html


def test_an_answered_approval_says_who_and_through_what() -> None:
    decided = {
        "approval_id": "apr_1",
        "tool": "agents.save_draft",
        "door": "mcp",
        "status": "approved",
        "decision": "approve",
        "scope": "call",
        "approver": {"id": "ada", "role": "admin"},
        "channel": "tab",
    }
    (entry,) = timeline.entries([event(1, "approval.decided", decided)])
    assert entry.category == "approval"
    assert entry.who == {
        "approver": {"id": "ada", "role": "admin"},
        "channel": "tab",
        "decision": "approve",
        "scope": "call",
    }


def test_the_manifest_and_the_traces_are_found_among_the_records() -> None:
    trace = {"artifact_id": "art_t", "name": "trace.zip", "size": 10}
    records = [
        event(1, "sandbox-manifest/v1", {"commit": "a" * 40}),
        event(2, "sandbox-manifest/v1", {"commit": "b" * 40}),
        event(3, "browser_closed", {"reason": "ended"}),
        event(4, "browser_closed", {"reason": "ended", "trace": trace}),
    ]
    assert timeline.manifest(records) == {"commit": "b" * 40}
    assert timeline.traces(records) == [trace]
    assert timeline.manifest([]) is None


def test_a_hostile_string_is_shown_as_text() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    found = timeline.entries([call(1, hostile, input={"q": hostile})])
    html = entries_html(found, console_links("task_1"), 100.0)
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


def test_metrics_count_calls_refusals_and_shed_and_take_nearest_rank_percentiles() -> None:
    records = [call(i, "t.x", duration_ms=float(i)) for i in range(1, 101)]
    records.append(call(101, "t.x", status="denied", error={"code": "forbidden"}, duration_ms=1.0))
    records.append(
        call(102, "t.x", status="unavailable", error={"code": "overloaded"}, duration_ms=1.0)
    )
    records.append(event(103, "origin_blocked", {}))
    metrics = timeline.call_metrics(records)
    assert metrics["calls"] == 102
    assert metrics["refused"] == 1
    assert metrics["shed"] == 1
    assert metrics["by_status"] == {"succeeded": 100, "denied": 1, "unavailable": 1}
    # 102 durations: 1 ms three times, then 2 to 100 ms.
    assert metrics["p50_ms"] == 49.0
    assert metrics["p99_ms"] == 99.0
    assert timeline.call_metrics(records[:100])["p50_ms"] == 50.0
    assert timeline.percentile([], 0.5) is None
    assert timeline.percentile([7.0], 0.99) == 7.0
