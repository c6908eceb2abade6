"""The example dashboard's backend: organization-scoped records in its own SQLite file.

Every read and write takes a `Who` (organization, user, role) and filters by its
organization in the query itself, so a record of another organization is indistinguishable
from one that does not exist (`NotFound` either way). The dashboard pages, its JSON API and
the product tools all go through this one class.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Table, event, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from examples.synthetic_app import schema as t
from examples.synthetic_app.directory import (
    MODELS,
    ORGS,
    SEED_AGENTS,
    SEED_SUITES,
    USERS,
)
from examples.synthetic_app.errors import Conflict, Forbidden, InvalidInput, NotFound
from examples.synthetic_app.models import DraftFields, RunBudget, RunRequest

TERMINAL_RUN_STATES = frozenset({"completed", "failed"})
SCENARIO_VERDICTS = frozenset({"passed", "failed", "provider_error"})


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Who:
    """The acting user as the app knows them; built only from the app's own directory."""

    org_id: str
    user_id: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def who(org_id: str, user_id: str) -> Who:
    """The app's view of a user of an organization; refuses a user outside that org."""
    user = USERS.get(user_id)
    if user is None or user.org_id != org_id or org_id not in ORGS:
        raise Forbidden("this user does not belong to that organization")
    return Who(user.org_id, user.id, user.role)


class AppStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._engine: AsyncEngine | None = None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("the app store is not started")
        return self._engine

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(f"sqlite+aiosqlite:///{self.path.resolve()}")

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        self._engine = engine
        async with engine.begin() as conn:
            await conn.run_sync(t.metadata.create_all)
            seeded = (await conn.execute(select(func.count()).select_from(t.suites))).scalar()
            if not seeded:
                await _seed(conn)

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    # -- agents -----------------------------------------------------------------------

    async def list_agents(self, w: Who) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(t.agents).where(t.agents.c.org_id == w.org_id).order_by(t.agents.c.name)
                )
            ).mappings()
            agents = [dict(r) for r in rows]
            drafts = {
                r.agent_id
                for r in await conn.execute(
                    select(t.agent_drafts.c.agent_id).where(t.agent_drafts.c.org_id == w.org_id)
                )
            }
            versions = {
                r.id: r.number
                for r in await conn.execute(
                    select(t.agent_versions.c.id, t.agent_versions.c.number).where(
                        t.agent_versions.c.org_id == w.org_id
                    )
                )
            }
        return [
            {
                "id": a["id"],
                "name": a["name"],
                "version": versions.get(a["current_version_id"]),
                "current_version_id": a["current_version_id"],
                "has_draft": a["id"] in drafts,
            }
            for a in agents
        ]

    async def get_agent(self, w: Who, agent_id: str) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            agent = await _agent_row(conn, w, agent_id)
            versions = [
                _version(r)
                for r in (
                    await conn.execute(
                        select(t.agent_versions)
                        .where(
                            t.agent_versions.c.agent_id == agent_id,
                            t.agent_versions.c.org_id == w.org_id,
                        )
                        .order_by(t.agent_versions.c.number.desc())
                    )
                ).mappings()
            ]
            draft_row = (
                (
                    await conn.execute(
                        select(t.agent_drafts).where(
                            t.agent_drafts.c.agent_id == agent_id,
                            t.agent_drafts.c.org_id == w.org_id,
                        )
                    )
                )
                .mappings()
                .first()
            )
        current = next((v for v in versions if v["id"] == agent["current_version_id"]), None)
        return {
            "id": agent["id"],
            "name": agent["name"],
            "current_version": current,
            "versions": versions,
            "draft": _draft(draft_row) if draft_row is not None else None,
        }

    async def write_draft(
        self, w: Who, agent_id: str | None, fields: DraftFields
    ) -> dict[str, Any]:
        """Create or edit the agent's unsaved draft; a new agent starts as a draft only.

        Any member of the organization may draft; only an admin may save (`save_draft`).
        """
        given = fields.given()
        now = time.time()
        async with self.engine.begin() as conn:
            if agent_id is None:
                if "name" not in given:
                    raise InvalidInput("a new agent needs a name")
                agent_id = new_id("agt")
                await conn.execute(
                    insert(t.agents).values(
                        id=agent_id,
                        org_id=w.org_id,
                        name=given["name"],
                        current_version_id=None,
                        created_by=w.user_id,
                        created_at=now,
                    )
                )
                base: dict[str, Any] = {
                    "name": given["name"],
                    "instructions": "",
                    "model": next(iter(MODELS)),
                    "tools": [],
                }
                base_version_id = None
            else:
                agent = await _agent_row(conn, w, agent_id)
                existing = (
                    (
                        await conn.execute(
                            select(t.agent_drafts).where(
                                t.agent_drafts.c.agent_id == agent_id,
                                t.agent_drafts.c.org_id == w.org_id,
                            )
                        )
                    )
                    .mappings()
                    .first()
                )
                if existing is not None:
                    base = _draft(existing)
                    base_version_id = existing["base_version_id"]
                else:
                    base = {"name": agent["name"], "instructions": "", "model": "", "tools": []}
                    base_version_id = agent["current_version_id"]
                    if base_version_id is not None:
                        version = (
                            (
                                await conn.execute(
                                    select(t.agent_versions).where(
                                        t.agent_versions.c.id == base_version_id
                                    )
                                )
                            )
                            .mappings()
                            .one()
                        )
                        base = _version(version)
                    else:
                        base["model"] = next(iter(MODELS))
                await conn.execute(
                    t.agent_drafts.delete().where(t.agent_drafts.c.agent_id == agent_id)
                )
            merged = {
                "name": given.get("name", base["name"]),
                "instructions": given.get("instructions", base["instructions"]),
                "model": given.get("model", base["model"]),
                "tools": list(given.get("tools", base["tools"])),  # type: ignore[call-overload]
            }
            await conn.execute(
                insert(t.agent_drafts).values(
                    agent_id=agent_id,
                    org_id=w.org_id,
                    base_version_id=base_version_id,
                    updated_by=w.user_id,
                    updated_at=now,
                    **merged,
                )
            )
        return {"agent_id": agent_id, "draft": {**merged, "updated_by": w.user_id}}

    async def save_draft(self, w: Who, agent_id: str) -> dict[str, Any]:
        """Turn the agent's draft into its next version (admins only)."""
        async with self.engine.begin() as conn:
            await _agent_row(conn, w, agent_id)
            if not w.is_admin:
                raise Forbidden("only an admin may save an agent draft")
            draft = (
                (
                    await conn.execute(
                        select(t.agent_drafts).where(
                            t.agent_drafts.c.agent_id == agent_id,
                            t.agent_drafts.c.org_id == w.org_id,
                        )
                    )
                )
                .mappings()
                .first()
            )
            if draft is None:
                raise Conflict("this agent has no unsaved draft")
            number = (
                await conn.execute(
                    select(func.coalesce(func.max(t.agent_versions.c.number), 0)).where(
                        t.agent_versions.c.agent_id == agent_id
                    )
                )
            ).scalar_one() + 1
            version_id = new_id("ver")
            await conn.execute(
                insert(t.agent_versions).values(
                    id=version_id,
                    agent_id=agent_id,
                    org_id=w.org_id,
                    number=number,
                    name=draft["name"],
                    instructions=draft["instructions"],
                    model=draft["model"],
                    tools=draft["tools"],
                    created_by=w.user_id,
                    created_at=time.time(),
                )
            )
            await conn.execute(
                update(t.agents)
                .where(t.agents.c.id == agent_id, t.agents.c.org_id == w.org_id)
                .values(current_version_id=version_id, name=draft["name"])
            )
            await conn.execute(t.agent_drafts.delete().where(t.agent_drafts.c.agent_id == agent_id))
        return {"agent_id": agent_id, "version_id": version_id, "version": number}

    # -- suites -----------------------------------------------------------------------

    async def list_suites(self, w: Who) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(t.suites, func.count(t.scenarios.c.id).label("scenarios"))
                    .join(t.scenarios, t.scenarios.c.suite_id == t.suites.c.id)
                    .where(t.suites.c.org_id == w.org_id)
                    .group_by(t.suites.c.id)
                    .order_by(t.suites.c.name)
                )
            ).mappings()
            return [dict(r) for r in rows]

    async def get_suite(self, w: Who, suite_id: str) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            return await _suite(conn, w, suite_id)

    # -- runs -------------------------------------------------------------------------

    async def create_run(self, w: Who, request: RunRequest) -> dict[str, Any]:
        """Queue a run of the agent's current version on the chosen scenarios of a suite."""
        async with self.engine.begin() as conn:
            agent = await _agent_row(conn, w, request.agent_id)
            if agent["current_version_id"] is None:
                raise Conflict("this agent has no saved version to evaluate yet")
            suite = await _suite(conn, w, request.suite_id)
            by_id = {s["id"]: s for s in suite["scenarios"]}
            wanted = list(dict.fromkeys(request.scenario_ids or list(by_id)))
            missing = [s for s in wanted if s not in by_id]
            if missing:
                # Scenario ids of another suite or organization are simply unknown here.
                raise NotFound(f"no such scenario in this suite: {missing[0]}")
            run_id = new_id("run")
            await conn.execute(
                insert(t.runs).values(
                    id=run_id,
                    org_id=w.org_id,
                    agent_id=request.agent_id,
                    version_id=agent["current_version_id"],
                    suite_id=request.suite_id,
                    state="queued",
                    budget=request.budget.model_dump(),
                    created_by=w.user_id,
                    created_at=time.time(),
                )
            )
            await conn.execute(
                insert(t.run_results),
                [
                    {
                        "run_id": run_id,
                        "scenario_id": sid,
                        "org_id": w.org_id,
                        "position": i,
                        "name": by_id[sid]["name"],
                        "state": "pending",
                    }
                    for i, sid in enumerate(wanted)
                ],
            )
        return await self.get_run(w, run_id)

    async def get_run(self, w: Who, run_id: str) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            return await _run(conn, w.org_id, run_id)

    async def list_runs(self, w: Who, limit: int = 50) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            ids = [
                r.id
                for r in await conn.execute(
                    select(t.runs.c.id)
                    .where(t.runs.c.org_id == w.org_id)
                    .order_by(t.runs.c.created_at.desc())
                    .limit(limit)
                )
            ]
            return [await _run(conn, w.org_id, i) for i in ids]

    async def get_report(self, w: Who, run_id: str) -> dict[str, Any]:
        """The report of a finished run; a run still going has none yet (Conflict)."""
        async with self.engine.connect() as conn:
            run = await _run(conn, w.org_id, run_id)
            row = (
                (
                    await conn.execute(
                        select(t.reports).where(
                            t.reports.c.run_id == run_id, t.reports.c.org_id == w.org_id
                        )
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            raise Conflict(f"run {run_id} is {run['state']}; its report exists once it ends")
        return {"report_id": row["id"], "run": run, "summary": row["summary"]}

    # -- the run engine's side (no `Who`: the engine acts for the run's own org) ----------

    async def queued_run_ids(self) -> list[str]:
        async with self.engine.connect() as conn:
            return [
                r.id
                for r in await conn.execute(
                    select(t.runs.c.id)
                    .where(t.runs.c.state == "queued")
                    .order_by(t.runs.c.created_at)
                )
            ]

    async def fail_interrupted(self, reason: str) -> int:
        """Runs left `running` by a stopped process end as `failed`, never stay running."""
        async with self.engine.connect() as conn:
            stuck = [
                (r.id, r.org_id)
                for r in await conn.execute(
                    select(t.runs.c.id, t.runs.c.org_id).where(t.runs.c.state == "running")
                )
            ]
        for run_id, org_id in stuck:
            await self.finish_run(org_id, run_id, "failed", error=reason)
        return len(stuck)

    async def run_plan(self, run_id: str) -> dict[str, Any]:
        """Everything the engine needs to evaluate a run: version, scenarios, budget, org."""
        async with self.engine.connect() as conn:
            run = (await conn.execute(select(t.runs).where(t.runs.c.id == run_id))).mappings().one()
            version = (
                (
                    await conn.execute(
                        select(t.agent_versions).where(t.agent_versions.c.id == run["version_id"])
                    )
                )
                .mappings()
                .one()
            )
            results = (
                await conn.execute(
                    select(t.run_results.c.scenario_id)
                    .where(t.run_results.c.run_id == run_id)
                    .order_by(t.run_results.c.position)
                )
            ).all()
            scenario_rows = {
                r["id"]: dict(r)
                for r in (
                    await conn.execute(
                        select(t.scenarios).where(
                            t.scenarios.c.id.in_([r.scenario_id for r in results])
                        )
                    )
                ).mappings()
            }
        return {
            "run_id": run_id,
            "org_id": run["org_id"],
            "state": run["state"],
            "budget": RunBudget.model_validate(run["budget"]),
            "version": _version(version),
            "scenarios": [scenario_rows[r.scenario_id] for r in results],
        }

    async def set_run_state(self, run_id: str, state: str) -> None:
        values: dict[str, Any] = {"state": state}
        if state == "running":
            values["started_at"] = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(update(t.runs).where(t.runs.c.id == run_id).values(**values))

    async def set_scenario(
        self,
        run_id: str,
        scenario_id: str,
        state: str,
        *,
        reason: str | None = None,
        detail: str | None = None,
        tokens: int | None = None,
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(t.run_results)
                .where(t.run_results.c.run_id == run_id, t.run_results.c.scenario_id == scenario_id)
                .values(state=state, reason=reason, detail=detail, tokens=tokens)
            )

    async def finish_run(
        self, org_id: str, run_id: str, state: str, *, error: str | None = None
    ) -> dict[str, Any]:
        """Put the run in its terminal state and write its report, in one transaction."""
        if state not in TERMINAL_RUN_STATES:
            raise ValueError(f"{state!r} is not a terminal run state")
        async with self.engine.begin() as conn:
            await conn.execute(
                update(t.run_results)
                .where(
                    t.run_results.c.run_id == run_id,
                    t.run_results.c.state.in_(("pending", "running")),
                )
                .values(state="failed", reason="not_run", detail=error or "the run ended first")
            )
            await conn.execute(
                update(t.runs)
                .where(t.runs.c.id == run_id)
                .values(state=state, finished_at=time.time(), error=error)
            )
            run = await _run(conn, org_id, run_id)
            summary = {
                "state": state,
                "counts": run["counts"],
                "error": error,
                "agent_id": run["agent_id"],
                "version_id": run["version_id"],
                "suite_id": run["suite_id"],
            }
            await conn.execute(
                insert(t.reports).values(
                    id=new_id("rep"),
                    org_id=org_id,
                    run_id=run_id,
                    created_at=time.time(),
                    summary=summary,
                )
            )
        return run


async def _owned(
    conn: AsyncConnection, table: Table, org_id: str, row_id: str, what: str
) -> dict[str, Any]:
    """One row of `table` by id, only within `org_id`: another organization's is NotFound."""
    row = (
        (await conn.execute(select(table).where(table.c.id == row_id, table.c.org_id == org_id)))
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"no {what} {row_id[:40]} in this organization")
    return dict(row)


async def _agent_row(conn: AsyncConnection, w: Who, agent_id: str) -> dict[str, Any]:
    return await _owned(conn, t.agents, w.org_id, agent_id, "agent")


async def _suite(conn: AsyncConnection, w: Who, suite_id: str) -> dict[str, Any]:
    suite = await _owned(conn, t.suites, w.org_id, suite_id, "suite")
    scenarios = (
        await conn.execute(
            select(t.scenarios)
            .where(t.scenarios.c.suite_id == suite_id, t.scenarios.c.org_id == w.org_id)
            .order_by(t.scenarios.c.position)
        )
    ).mappings()
    return {
        **suite,
        "scenarios": [
            {
                "id": s["id"],
                "name": s["name"],
                "prompt": s["prompt"],
                "provider": s["provider"],
            }
            for s in scenarios
        ],
    }


async def _run(conn: AsyncConnection, org_id: str, run_id: str) -> dict[str, Any]:
    run = await _owned(conn, t.runs, org_id, run_id, "run")
    results = [
        {
            "scenario_id": r["scenario_id"],
            "name": r["name"],
            "state": r["state"],
            "reason": r["reason"],
            "detail": r["detail"],
            "tokens": r["tokens"],
        }
        for r in (
            await conn.execute(
                select(t.run_results)
                .where(t.run_results.c.run_id == run_id)
                .order_by(t.run_results.c.position)
            )
        ).mappings()
    ]
    counts = dict.fromkeys(("pending", "running", "passed", "failed", "provider_error"), 0)
    for r in results:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return {
        "run_id": run["id"],
        "agent_id": run["agent_id"],
        "version_id": run["version_id"],
        "suite_id": run["suite_id"],
        "state": run["state"],
        "terminal": run["state"] in TERMINAL_RUN_STATES,
        "budget": run["budget"],
        "error": run["error"],
        "created_by": run["created_by"],
        "created_at": run["created_at"],
        "finished_at": run["finished_at"],
        "counts": counts,
        "scenarios": results,
    }


def _version(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "number": row["number"],
        "name": row["name"],
        "instructions": row["instructions"],
        "model": row["model"],
        "tools": list(row["tools"]),
        "created_by": row["created_by"],
    }


def _draft(row: Any) -> dict[str, Any]:
    return {
        "name": row["name"],
        "instructions": row["instructions"],
        "model": row["model"],
        "tools": list(row["tools"]),
        "updated_by": row["updated_by"],
    }


async def _seed(conn: AsyncConnection) -> None:
    now = time.time()
    for org_id, agents in SEED_AGENTS.items():
        admin = next(u.id for u in USERS.values() if u.org_id == org_id and u.role == "admin")
        for agent in agents:
            agent_id, version_id = new_id("agt"), new_id("ver")
            await conn.execute(
                insert(t.agents).values(
                    id=agent_id,
                    org_id=org_id,
                    name=agent.name,
                    current_version_id=version_id,
                    created_by=admin,
                    created_at=now,
                )
            )
            await conn.execute(
                insert(t.agent_versions).values(
                    id=version_id,
                    agent_id=agent_id,
                    org_id=org_id,
                    number=1,
                    name=agent.name,
                    instructions=agent.instructions,
                    model=agent.model,
                    tools=list(agent.tools),
                    created_by=admin,
                    created_at=now,
                )
            )
    for org_id, suites in SEED_SUITES.items():
        for suite in suites:
            suite_id = new_id("ste")
            await conn.execute(
                insert(t.suites).values(
                    id=suite_id, org_id=org_id, name=suite.name, description=suite.description
                )
            )
            for position, sc in enumerate(suite.scenarios):
                await conn.execute(
                    insert(t.scenarios).values(
                        id=new_id("scn"),
                        suite_id=suite_id,
                        org_id=org_id,
                        position=position,
                        name=sc.name,
                        prompt=sc.prompt,
                        required_terms=list(sc.required_terms),
                        required_tool=sc.required_tool,
                        provider=sc.provider,
                    )
                )
