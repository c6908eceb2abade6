"""Evidence floods, from the attacker's side: a tab reconnecting with bad frames, and a
task whose events pass their quota. Refusals are kept as bounded aggregates, the quota
holds with a clear signal, and the answered calls' own records are never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway
from tests.tabs.conftest import DASHBOARD, TabGateway, _start

Factory = Callable[..., Any]
RECONNECTS = 50


def _occurrences(records: list[dict[str, Any]]) -> int:
    return sum(r["data"]["count"] if r["data"].get("aggregate") else 1 for r in records)


async def test_bad_frames_from_reconnecting_tabs_are_aggregated(
    tab_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    task = await tab_gateway.create_task()
    sent = 0
    for _ in range(RECONNECTS):
        async with raw_tab_factory(tab_gateway.ws_url) as tab:
            await tab.hello(task["tokens"]["tab"])
            for bad in ("not json", {"type": "reply", "id": "x"}, {"type": "nonsense"}):
                await tab.send(bad)
                sent += 1
                assert (await tab.recv())["type"] == "error"
    records: list[dict[str, Any]] = []
    for _ in range(100):  # the last window's aggregate is written when it closes (2 s)
        records = await tab_gateway.evidence(task["task_id"], "tab.frame_rejected")
        if _occurrences(records) >= sent:
            break
        await asyncio.sleep(0.05)
    # Every refusal is accounted for, in a handful of records instead of one each.
    assert _occurrences(records) == sent
    assert len(records) <= 10, len(records)
    aggregates = [r for r in records if r["data"].get("aggregate")]
    assert aggregates and all(len(r["data"]["samples"]) <= 10 for r in aggregates)
    assert all(r["data"]["first_at"] <= r["data"]["last_at"] for r in aggregates)


def _quota_of_ten(gw: Gateway) -> None:
    gw.events.quota = 10


async def test_a_task_past_its_event_quota_keeps_its_calls(tmp_path: Path) -> None:
    async with _start(tmp_path, [DASHBOARD], None, _quota_of_ten) as tabs:
        task = await tabs.create_task()
        identity = await tabs.gw.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
        for i in range(30):
            await tabs.gw.events.record(identity, "host.note", {"i": i})
        # A call after the quota (no tab: it ends tab_unavailable) is still recorded.
        call = await tabs.gw.pipeline.call(identity, "ui.read_view", {}, door=Door.INTERNAL)
        records = (
            await tabs.http.get(f"/v1/tasks/{task['task_id']}/evidence", headers=tabs.control)
        ).json()["records"]
        notes = [r for r in records if r["kind"] == "host.note"]
        assert [r["data"]["i"] for r in notes] == list(range(10))
        [reached] = [r for r in records if r["kind"] == "evidence_quota_reached"]
        assert reached["data"]["quota"] == 10
        [recorded] = [r for r in records if r["kind"] == "call"]
        assert (recorded["call_id"], recorded["status"]) == (call.call_id, call.status.value)
        described = (
            await tabs.http.get(f"/v1/tasks/{task['task_id']}", headers=tabs.control)
        ).json()
        assert described["evidence"] == {"events": 11, "dropped": 20, "quota": 10}
        assert await tabs.metric("gateway_evidence_events_dropped_total") == 20
