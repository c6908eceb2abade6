"""A task in the console: a page of its timeline (with the cursors of the pages around
it), and what changed since the page was drawn, for its live poll."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.console import pages, timeline
from gateway.console.access import Viewer
from gateway.console.cards import approval_card
from gateway.console.entries_html import entries_html
from gateway.console.guard import Guard
from gateway.console.links import BASE, console_links
from gateway.console.markup import ms
from gateway.core.errors import InvalidInput
from gateway.core.store.evidence import MAX_SEQ
from gateway.core.store.tasks import TaskRecord
from gateway.http.edge import query_int

# A page of a task's timeline shows this many records; older and newer pages the rest.
PAGE_RECORDS = 5000
LIVE_RECORDS = 500


@dataclass(frozen=True)
class Window:
    """One page of a task's timeline, and the cursors of the pages around it."""

    records: list[dict[str, Any]]
    after: int
    # `?before=` of the older page, `?after=` of the newer one; None: there is none.
    older_before: int | None
    newer_after: int | None

    @property
    def whole(self) -> bool:
        return self.older_before is None and self.newer_after is None


def routes(guard: Guard) -> list[BaseRoute]:
    gw, access, base = guard.gw, guard.access, BASE

    async def gathered(record: TaskRecord, limit: int) -> tuple[list[dict[str, Any]], bool]:
        identity = record.identity
        records = await gw.store.evidence_for(
            identity.org_id, identity.task_id, after=0, limit=limit + 1
        )
        return records[:limit], len(records) > limit

    async def task_page(request: Request, viewer: Viewer) -> Response:
        """A page of the task's timeline: the `PAGE_RECORDS` records after `after` (the
        first ones by default), or the ones just before `before`, with links to the older
        and newer pages. Only its newest page follows the task live."""
        record = await guard.visible_task(viewer, request.path_params["task_id"])
        identity = record.identity
        org_id, task_id = identity.org_id, identity.task_id
        window = await timeline_window(request, record)
        records = window.records
        # The metrics are of the task's first records on every page, as the live poll's.
        first = (
            records if window.older_before is None else (await gathered(record, PAGE_RECORDS))[0]
        )
        # The recording and the manifest are the task's, wherever their records fall.
        whole = records if window.whole else await guard.recording_records(record)
        if window.newer_after is None:
            last_seq = records[-1]["seq"] if records else window.after
        else:
            # Not the newest page: the live poll brings counts and approvals, no entries.
            newest = await gw.store.evidence_for(org_id, task_id, before=MAX_SEQ, limit=1)
            last_seq = newest[-1]["seq"] if newest else 0
        start = timeline.entries(first[:1])
        html = pages.task_page(
            gw.tasks.describe(record),
            timeline.entries(records),
            metrics=timeline.call_metrics(first),
            approvals=await gw.approvals.listing(task_id),
            traces=timeline.traces(whole),
            manifest=timeline.manifest(whole),
            videos=timeline.videos(whole),
            last_seq=last_seq,
            viewer=viewer.id,
            csrf=access.csrf_token(viewer),
            origin=start[0].at if start else None,
            older_before=window.older_before,
            newer_after=window.newer_after,
        )
        return HTMLResponse(html)

    async def timeline_window(request: Request, record: TaskRecord) -> Window:
        identity = record.identity
        org_id, task_id = identity.org_id, identity.task_id
        params = request.query_params
        if "after" in params and "before" in params:
            raise InvalidInput("a page of the timeline is asked for by after or before, not both")
        if "before" in params:
            before = query_int(request, "before", MAX_SEQ, low=1, high=MAX_SEQ)
            records = await gw.store.evidence_for(
                org_id, task_id, before=before, limit=PAGE_RECORDS
            )
            after = records[0]["seq"] - 1 if records else 0
        else:
            after = query_int(request, "after", 0, low=0, high=MAX_SEQ)
            records = await gw.store.evidence_for(org_id, task_id, after=after, limit=PAGE_RECORDS)
        low = records[0]["seq"] if records else after + 1
        older = await gw.store.evidence_for(org_id, task_id, before=low, limit=1)
        high = records[-1]["seq"] if records else after
        newer = await gw.store.evidence_for(org_id, task_id, after=high, limit=1)
        return Window(
            records,
            after=after,
            older_before=low if older else None,
            newer_after=high if newer and records else None,
        )

    async def task_live(request: Request, viewer: Viewer) -> Response:
        """What changed since `after`: new timeline entries (rendered), the counts, and
        every approval's state (a card for each pending one)."""
        record = await guard.visible_task(viewer, request.path_params["task_id"])
        identity = record.identity
        after = query_int(request, "after", 0, low=0, high=MAX_SEQ)
        fresh = await gw.store.evidence_for(
            identity.org_id, identity.task_id, after=after, limit=LIVE_RECORDS
        )
        everything, _ = await gathered(record, PAGE_RECORDS)
        approvals = await gw.approvals.listing(identity.task_id)
        links = console_links(identity.task_id)
        metrics = timeline.call_metrics(everything)
        pending = sum(1 for a in approvals if a.get("status") == "pending")
        first = timeline.entries(everything[:1])
        origin = first[0].at if first else None
        return JSONResponse(
            {
                "status": str(gw.tasks.status_of(record)),
                "last_seq": fresh[-1]["seq"] if fresh else after,
                "entries_html": entries_html(timeline.entries(fresh), links, origin),
                "metrics": {
                    "calls": metrics["calls"],
                    "refused": metrics["refused"],
                    "shed": metrics["shed"],
                    "pending_approvals": pending,
                    "p50": ms(metrics["p50_ms"]),
                    "p99": ms(metrics["p99_ms"]),
                },
                "approvals": [
                    {
                        "approval_id": a["approval_id"],
                        "status": a["status"],
                        "html": approval_card(a),
                    }
                    for a in approvals
                ],
            }
        )

    return [
        Route(f"{base}/tasks/{{task_id}}", guard.page(task_page), methods=["GET"]),
        Route(f"{base}/api/tasks/{{task_id}}/live", guard.api(task_live), methods=["GET"]),
    ]
