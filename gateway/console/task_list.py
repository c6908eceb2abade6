"""The console's list of tasks, filtered by organization, actor, status and door, with
each task's counts; as a page and as the JSON its live poll reads."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.console import pages
from gateway.console.access import Viewer
from gateway.console.guard import Guard
from gateway.console.links import BASE
from gateway.core.errors import InvalidInput


def routes(guard: Guard) -> list[BaseRoute]:
    gw, access, base = guard.gw, guard.access, BASE

    def filters_of(request: Request) -> dict[str, str | None]:
        params = request.query_params
        chosen: dict[str, str | None] = {}
        for name in ("org", "actor", "status", "door"):
            value = (params.get(name) or "").strip()
            if len(value) > 128:
                raise InvalidInput(f"the {name} filter is too long")
            chosen[name] = value or None
        if chosen["status"] not in (None, *pages.STATUSES):
            raise InvalidInput(f"status is one of {', '.join(pages.STATUSES)}")
        if chosen["door"] not in (None, *pages.DOORS):
            raise InvalidInput(f"door is one of {', '.join(pages.DOORS)}")
        return chosen

    async def listed(viewer: Viewer, filters: dict[str, str | None]) -> list[dict[str, Any]]:
        org_ids: list[str] | None
        if viewer.org_ids is None:
            org_ids = [filters["org"]] if filters["org"] else None
        else:
            wanted = {filters["org"]} if filters["org"] else viewer.org_ids
            org_ids = sorted(viewer.org_ids & wanted)
        records = await gw.store.task_rows(
            now=time.time(),
            org_ids=org_ids,
            actor_id=filters["actor"],
            status=filters["status"],
            door=filters["door"],
        )
        tallies = await gw.store.task_tallies([r.identity.task_id for r in records])
        out = []
        for record in records:
            identity = record.identity
            tally = tallies[identity.task_id]
            out.append(
                {
                    "task_id": identity.task_id,
                    "org_id": identity.org_id,
                    "actor": identity.actor.id,
                    "status": str(gw.tasks.status_of(record)),
                    "created_at": identity.created_at.timestamp(),
                    "doors": tally.pop("doors"),
                    "tally": tally,
                }
            )
        return out

    async def tasks_page(request: Request, viewer: Viewer) -> Response:
        filters = filters_of(request)
        found = await listed(viewer, filters)
        html = pages.tasks_page(found, filters, viewer=viewer.id, csrf=access.csrf_token(viewer))
        return HTMLResponse(html)

    async def tasks_json(request: Request, viewer: Viewer) -> Response:
        return JSONResponse({"tasks": await listed(viewer, filters_of(request))})

    return [
        Route(base, guard.page(tasks_page), methods=["GET"]),
        Route(f"{base}/", guard.page(tasks_page), methods=["GET"]),
        Route(f"{base}/api/tasks", guard.api(tasks_json), methods=["GET"]),
    ]
