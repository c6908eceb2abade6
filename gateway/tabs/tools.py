"""The built-in `ui.*` tools (scope `ui`): one per UI action, each sends its action to the
task's tab and returns the tab's reply, whichever door the call came in by."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gateway.core.errors import ToolFailure
from gateway.core.registry import Registry, Tool, ToolAnnotations, ToolContext
from gateway.core.results import ErrorCode, ToolStatus
from gateway.tabs.actions import (
    DisplayProposedChangeArgs,
    OpenViewArgs,
    PopulateDraftArgs,
    ReadViewArgs,
    ShowRunProgressArgs,
)
from gateway.tabs.hub import TabHub

UI_SCOPE = "ui"
# The tab gets a little less time than the tool, so a slow tab ends as the tab channel's
# own `timeout` (and the page gets a `cancel`) rather than as the pipeline's deadline.
TOOL_TIMEOUT_S = 30.0
TAB_TIMEOUT_S = 25.0
TAB_MARGIN_S = TOOL_TIMEOUT_S - TAB_TIMEOUT_S


def _handler(kind: str) -> Any:
    async def handle(ctx: ToolContext, args: BaseModel) -> dict[str, Any]:
        hub = ctx.service(TabHub)
        try:
            action = hub.action(kind, args)
        except ValueError as exc:
            raise ToolFailure(ToolStatus.FAILED, ErrorCode.INVALID_INPUT, str(exc)[:500]) from None
        # The tab's deadline stays ahead of the call's, if the call has less time left.
        timeout = min(TAB_TIMEOUT_S, max(0.0, ctx.time_left() - TAB_MARGIN_S))
        outcome = await hub.send(ctx.identity, action, timeout_s=timeout)
        ctx.evidence["tab"] = {"request_id": outcome.request_id, "action": kind}
        if outcome.error is not None and outcome.error.code == ErrorCode.OVERLOADED:
            ctx.evidence["admission"] = {"shed": True}  # nothing was sent to the tab
        elif outcome.waited_s > 0:
            ctx.evidence["admission"] = {"waited_ms": round(outcome.waited_s * 1000, 1)}
        return outcome.unwrap()

    return handle


NO_HINTS = ToolAnnotations()


def _ui_tool(
    kind: str,
    title: str,
    description: str,
    input_model: type[BaseModel],
    annotations: ToolAnnotations = NO_HINTS,
) -> Tool:
    return Tool(
        name=f"ui.{kind}",
        title=title,
        description=description,
        input_model=input_model,
        handler=_handler(kind),
        scopes=frozenset({UI_SCOPE}),
        annotations=annotations,
        timeout_s=TOOL_TIMEOUT_S,
    )


UI_TOOLS = (
    _ui_tool(
        "read_view",
        "Read the current view",
        "What the task's dashboard tab shows now: view, params, selection, revision and "
        "the actions it offers.",
        ReadViewArgs,
        ToolAnnotations(read_only_hint=True, untrusted_content_hint=True),
    ),
    _ui_tool(
        "open_view",
        "Open a view",
        "Navigate the dashboard tab to one of the app's registered views, with params "
        "checked against that view's schema.",
        OpenViewArgs,
    ),
    _ui_tool(
        "populate_draft",
        "Populate the agent draft",
        "Fill the agent builder's draft (name, instructions, model, tools) in the tab. "
        "Nothing is saved.",
        PopulateDraftArgs,
    ),
    _ui_tool(
        "show_run_progress",
        "Show run progress",
        "Show the progress of an evaluation run in the dashboard tab.",
        ShowRunProgressArgs,
    ),
    _ui_tool(
        "display_proposed_change",
        "Display a proposed change",
        "Show a proposed change (title, summary, diff) to the user, as plain text.",
        DisplayProposedChangeArgs,
    ),
)


def register_ui_tools(registry: Registry) -> None:
    for tool in UI_TOOLS:
        registry.add(tool)
