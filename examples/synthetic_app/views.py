"""The dashboard's views: their names, their params and the path each one lives at.

The same table serves three readers: the server (which path renders which view), the
gateway's view registry (what `open_view` may ask for), and the page's script (which gets
the view and params of each page from `data-` attributes, never a URL from the agent).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from examples.synthetic_app.models import Id


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BuilderParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: Id | None = None


class SuiteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite_id: Id


class RunParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: Id


# name -> (params model, title)
VIEWS: dict[str, tuple[type[BaseModel], str]] = {
    "agents": (NoParams, "Agents"),
    "agent_builder": (BuilderParams, "Agent builder"),
    "suites": (NoParams, "Evaluation suites"),
    "suite": (SuiteParams, "Evaluation suite"),
    "runs": (NoParams, "Evaluation runs"),
    "run": (RunParams, "Evaluation run"),
    "report": (RunParams, "Evaluation report"),
}

# Every UI action the dashboard's pages handle, on every view: the builder is reached from
# anywhere (populate_draft opens it), and progress and proposed changes live in the panel.
PAGE_ACTIONS = (
    "open_view",
    "populate_draft",
    "show_run_progress",
    "display_proposed_change",
    "read_view",
)


def path_of(view: str, params: dict[str, Any]) -> str:
    """The dashboard path of a validated view (ids are pattern-checked: no escaping needed)."""
    model, _ = VIEWS[view]
    p = model.model_validate(params).model_dump(exclude_none=True)
    match view:
        case "agents":
            return "/agents"
        case "agent_builder":
            return f"/agents/{p['agent_id']}" if "agent_id" in p else "/agents/new"
        case "suites":
            return "/suites"
        case "suite":
            return f"/suites/{p['suite_id']}"
        case "runs":
            return "/runs"
        case "run":
            return f"/runs/{p['run_id']}"
        case "report":
            return f"/reports/{p['run_id']}"
    raise ValueError(f"no view named {view!r}")
