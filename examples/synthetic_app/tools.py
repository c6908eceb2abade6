"""The example app's product tools: the six operations of the first workflow.

    from examples.synthetic_app.tools import install_product_tools
    install_product_tools(gw, dashboard)   # before the app is built (or any time after)

| tool                   | scope        | role  | observable result                            |
|------------------------|--------------|-------|----------------------------------------------|
| `dashboard.read_view`  | agents:read  |       | allowed context, selection, actions          |
| `agents.prepare_draft` | agents:write |       | the builder shows the draft                  |
| `agents.save_draft`    | agents:write | admin | persisted agent/version id, builder reloaded |
| `evals.start_run`      | evals:run    |       | a queued run id, its scenarios and budget    |
| `evals.read_progress`  | evals:read   |       | per-scenario verdicts, explicit end state    |
| `evals.open_report`    | evals:read   |       | the report open in the dashboard             |

Every handler acts as the task's own organization and actor, as the app's directory knows
them: a record of another organization is `denied`/`not_found`, exactly as if it did not
exist. UI effects go through the tab channel as allowlisted actions (`TabHub`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from examples.synthetic_app.directory import ORGS
from examples.synthetic_app.models import DraftFields, Id, RunRequest
from examples.synthetic_app.store import Who, who
from examples.synthetic_app.views import VIEWS
from examples.synthetic_app.web import SyntheticApp
from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.registry import Tool, ToolAnnotations, ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from gateway.runtime import Gateway
from gateway.tabs import TabHub, TabOutcome, Views

TAB_TIMEOUT_S = 20.0
TOOL_TIMEOUT_S = 30.0

# A run whose token budget over all its scenarios is above this asks the user first.
RUN_APPROVAL_TOKENS = 20_000
TOOL_NAMES = (
    "dashboard.read_view",
    "agents.prepare_draft",
    "agents.save_draft",
    "evals.start_run",
    "evals.read_progress",
    "evals.open_report",
)


class ReadViewInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PrepareDraftInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: Id | None = Field(default=None, description="the agent to edit; omit for a new one")
    fields: DraftFields


class SaveDraftInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: Id


class ReadProgressInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: Id
    wait_s: float = Field(
        default=0.0, ge=0.0, le=10.0, description="wait up to this long for the run to move"
    )


class OpenReportInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: Id


def _who(ctx: ToolContext) -> Who:
    return who(ctx.identity.org_id, ctx.identity.actor.id)


async def _send(ctx: ToolContext, kind: str, args: dict[str, Any]) -> TabOutcome:
    hub = ctx.service(TabHub)
    try:
        action = hub.action(kind, args)
    except ValueError as exc:
        raise ToolFailure(ToolStatus.FAILED, ErrorCode.INVALID_INPUT, str(exc)[:500]) from None
    outcome = await hub.send(ctx.identity, action, timeout_s=TAB_TIMEOUT_S)
    ctx.evidence.setdefault("tab", []).append(
        {"request_id": outcome.request_id, "action": kind, "status": outcome.status.value}
    )
    return outcome


def _tab_note(outcome: TabOutcome) -> dict[str, Any]:
    """A best-effort UI effect's outcome, for a tool whose own result stands without it."""
    if outcome.ok:
        return {"status": "succeeded", "result": outcome.result or {}}
    assert outcome.error is not None
    return {"status": outcome.status.value, "error": outcome.error.model_dump(exclude_none=True)}


def register_views(views: Views) -> None:
    for name, (params_model, title) in VIEWS.items():
        if views.get(name) is None:
            views.register(name, params_model, title)


def install_product_tools(gw: Gateway, app: SyntheticApp) -> list[Tool]:
    """Register the six operations (and the app's views) in this gateway; returns the tools.

    `app` is the dashboard instance whose records the tools act on. The tab channel
    extension may be installed before or after: the views are shared through the
    gateway's services either way.
    """
    views = gw.services.find(Views)
    if views is None:
        views = Views()
        gw.services.provide(Views, views)
    register_views(views)

    async def read_view(ctx: ToolContext, _args: ReadViewInput) -> dict[str, Any]:
        w = _who(ctx)
        seen = (await _send(ctx, "read_view", {})).unwrap()
        params = seen.get("params") if isinstance(seen.get("params"), dict) else {}
        selection = seen.get("selection") if isinstance(seen.get("selection"), dict) else {}
        merged = {**(params or {}), **(selection or {})}
        selected: dict[str, Any] = {}
        # The page says what is selected; the app says what it is, for this org only.
        agent_id = merged.get("agent_id")
        if isinstance(agent_id, str):
            try:
                agent = await app.store.get_agent(w, agent_id)
                selected["agent"] = {
                    "id": agent["id"],
                    "name": agent["name"],
                    "version": (agent["current_version"] or {}).get("number"),
                    "version_id": (agent["current_version"] or {}).get("id"),
                    "has_unsaved_draft": agent["draft"] is not None,
                }
            except GatewayError:
                selected["agent"] = None
        run_id = merged.get("run_id")
        if isinstance(run_id, str):
            try:
                run = await app.store.get_run(w, run_id)
                selected["run"] = {
                    "id": run["run_id"],
                    "state": run["state"],
                    "terminal": run["terminal"],
                    "counts": run["counts"],
                }
            except GatewayError:
                selected["run"] = None
        mine = {t["tool_id"] for t in gw.registry.catalog(ctx.identity)}
        return {
            "context": {
                "org": {"id": w.org_id, "name": ORGS[w.org_id].name},
                "actor": {"id": w.user_id, "role": w.role},
            },
            "view": seen.get("view"),
            "params": params,
            "revision": seen.get("revision"),
            "selected": selected,
            "available_actions": {
                "ui": seen.get("available_actions", []),
                "tools": [name for name in TOOL_NAMES if name in mine],
                # Callable once a person approves (the call itself asks).
                "need_approval": [
                    t.name
                    for t in gw.registry
                    if t.name in mine and t.approval(ctx.identity) is not None
                ],
            },
        }

    async def prepare_draft(ctx: ToolContext, args: PrepareDraftInput) -> dict[str, Any]:
        # The fields must also be fit to show (no URL or markup in a name...): check before
        # anything is written, so a refused draft leaves no trace.
        try:
            ctx.service(TabHub).action(
                "populate_draft", {"agent_id": args.agent_id, "fields": args.fields.given()}
            )
        except ValueError as exc:
            raise ToolFailure(ToolStatus.FAILED, ErrorCode.INVALID_INPUT, str(exc)[:500]) from None
        written = await app.store.write_draft(_who(ctx), args.agent_id, args.fields)
        agent_id, draft = written["agent_id"], written["draft"]
        ctx.evidence["agent_id"] = agent_id
        outcome = await _send(
            ctx,
            "populate_draft",
            {
                "agent_id": agent_id,
                "fields": {k: draft[k] for k in ("name", "instructions", "model", "tools")},
            },
        )
        if not outcome.ok:
            assert outcome.error is not None
            # The draft is kept (it is only a draft); the caller learns where it is.
            raise ToolFailure(
                outcome.status,
                outcome.error.code,
                f"the draft was written but the builder did not show it: {outcome.error.message}",
                retryable=outcome.error.retryable,
                details={"agent_id": agent_id, "saved": False},
            )
        return {
            "agent_id": agent_id,
            "draft": {k: draft[k] for k in ("name", "instructions", "model", "tools")},
            "saved": False,
            "builder": outcome.result or {},
        }

    async def save_draft(ctx: ToolContext, args: SaveDraftInput) -> dict[str, Any]:
        w = _who(ctx)
        approver = ctx.approved_by
        if not w.is_admin and approver is not None and approver.get("role") == "admin":
            # An admin of the organization approved this member's save: it is saved on the
            # admin's authority (`who` refuses anyone outside the organization).
            w = who(w.org_id, approver["id"])
            ctx.evidence["saved_as"] = approver["id"]
        saved = await app.store.save_draft(w, args.agent_id)
        ctx.evidence["version_id"] = saved["version_id"]
        # The version is persisted whatever the tab does; reloading the builder is a courtesy.
        outcome = await _send(
            ctx, "open_view", {"view": "agent_builder", "params": {"agent_id": args.agent_id}}
        )
        return {**saved, "builder": _tab_note(outcome)}

    async def start_run(ctx: ToolContext, args: RunRequest) -> dict[str, Any]:
        w = _who(ctx)
        scenarios = (
            len(args.scenario_ids)
            if args.scenario_ids
            else len((await app.store.get_suite(w, args.suite_id))["scenarios"])
        )
        estimate = scenarios * args.budget.max_tokens
        if estimate > RUN_APPROVAL_TOKENS:
            # The product's own rule: a run this expensive needs the user's yes, whatever
            # the task's grant says.
            await ctx.request_approval(
                f"Start an evaluation of {args.agent_id} on {scenarios} scenarios of "
                f"{args.suite_id}, up to {estimate} tokens.",
                {"estimated_tokens": estimate, "threshold": RUN_APPROVAL_TOKENS},
            )
        run = await app.start_run(w, args)
        ctx.evidence["run_id"] = run["run_id"]
        outcome = await _send(ctx, "show_run_progress", {"run_id": run["run_id"]})
        return {
            "run_id": run["run_id"],
            "state": run["state"],
            "note": "queued, not passed: read evals.read_progress for the verdicts",
            "agent_id": run["agent_id"],
            "version_id": run["version_id"],
            "suite_id": run["suite_id"],
            "scenarios": [
                {"scenario_id": s["scenario_id"], "name": s["name"]} for s in run["scenarios"]
            ],
            "budget": {"per_scenario": run["budget"]},
            "progress_shown": _tab_note(outcome),
        }

    async def read_progress(ctx: ToolContext, args: ReadProgressInput) -> dict[str, Any]:
        w = _who(ctx)
        seen = app.engine.generation
        run = await app.store.get_run(w, args.run_id)
        if args.wait_s and not run["terminal"]:
            # Long-poll: answer as soon as anything in the run moves, or after the wait.
            await app.engine.wait_changed(args.wait_s, since=seen)
            run = await app.store.get_run(w, args.run_id)
        return {
            "run_id": run["run_id"],
            "state": run["state"],
            "terminal": run["terminal"],
            "error": run["error"],
            "counts": run["counts"],
            "budget": {"per_scenario": run["budget"]},
            "scenarios": run["scenarios"],
        }

    async def open_report(ctx: ToolContext, args: OpenReportInput) -> dict[str, Any]:
        report = await app.store.get_report(_who(ctx), args.run_id)
        outcome = await _send(
            ctx, "open_view", {"view": "report", "params": {"run_id": args.run_id}}
        )
        shown = outcome.unwrap()
        run = report["run"]
        return {
            "report_id": report["report_id"],
            "run_id": run["run_id"],
            "state": run["state"],
            "counts": run["counts"],
            "view": shown,
        }

    specs: list[Tool] = [
        Tool(
            name="dashboard.read_view",
            title="Read the current view",
            description="What the user's dashboard shows now (view, selected agent or run) "
            "and what this task may do there.",
            input_model=ReadViewInput,
            handler=read_view,
            scopes=frozenset({"agents:read"}),
            annotations=ToolAnnotations(read_only_hint=True, untrusted_content_hint=True),
            timeout_s=TOOL_TIMEOUT_S,
        ),
        Tool(
            name="agents.prepare_draft",
            title="Prepare an agent draft",
            description="Write an agent's unsaved draft (instructions, model, tools) and show "
            "it in the builder. Omit agent_id to start a new agent. Nothing is saved.",
            input_model=PrepareDraftInput,
            handler=prepare_draft,
            scopes=frozenset({"agents:write"}),
            timeout_s=TOOL_TIMEOUT_S,
            side_effects=True,
        ),
        Tool(
            name="agents.save_draft",
            title="Save an agent draft",
            description="Save the agent's draft as its next version (admins only); returns "
            "the persisted agent and version ids and reloads the builder.",
            input_model=SaveDraftInput,
            handler=save_draft,
            scopes=frozenset({"agents:write"}),
            roles=frozenset({"admin"}),
            annotations=ToolAnnotations(consequential_hint=True),
            timeout_s=TOOL_TIMEOUT_S,
            side_effects=True,
        ),
        Tool(
            name="evals.start_run",
            title="Start an evaluation",
            description="Queue an evaluation of the agent's saved version on the chosen "
            "scenarios of a suite, with a per-scenario token budget. A run id means queued, "
            "not passed.",
            input_model=RunRequest,
            handler=start_run,
            scopes=frozenset({"evals:run"}),
            annotations=ToolAnnotations(consequential_hint=True),
            timeout_s=TOOL_TIMEOUT_S,
            side_effects=True,
            long_running=True,
        ),
        Tool(
            name="evals.read_progress",
            title="Read evaluation progress",
            description="Per-scenario results (passed, failed, provider_error) and the run's "
            "state; `terminal` says whether it has ended (completed or failed).",
            input_model=ReadProgressInput,
            handler=read_progress,
            scopes=frozenset({"evals:read"}),
            annotations=ToolAnnotations(read_only_hint=True),
            timeout_s=TOOL_TIMEOUT_S,
        ),
        Tool(
            name="evals.open_report",
            title="Open an evaluation report",
            description="Open the report of a finished run in the user's dashboard.",
            input_model=OpenReportInput,
            handler=open_report,
            scopes=frozenset({"evals:read"}),
            timeout_s=TOOL_TIMEOUT_S,
        ),
    ]
    for tool in specs:
        gw.registry.add(tool)
    return specs


__all__ = ["TOOL_NAMES", "install_product_tools", "register_views"]
