"""The UI actions a task may ask its dashboard tab to perform: the whole allowlist.

A model's output never becomes script, markup or a navigation URL. It can only become one of
the five actions below, each a closed pydantic model whose every field is validated: names
and ids by pattern, labels by a "no URL, no markup" rule, free text (instructions, summary,
diff) only bounded, because the page shows it as text and never as HTML.

The action's wire form is a JSON object with a `type` naming the action and its fields:
`{"type": "open_view", "view": "agent_builder", "params": {"agent_id": "ag_1"}}`.

`target_holds(action, view)` is the recheck the channel runs when the page moves to a new
revision while an action aimed at the old one is still pending; the JS shim runs the same
rule, compiled from the tables it reads (`ABSOLUTE_ACTIONS`, `BOUND_FIELDS`,
`NAMING_PARTS`), before it applies an action that arrived after a navigation.

These models are the one source of the rules: `gateway.tabs.rules` compiles them into the
ES module the shim imports (`webmcp_js/tab-rules.js`), and a test fails when it is stale.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
)

from gateway.tabs.views import Views, unsafe_reason

ACTION_TYPES = (
    "open_view",
    "populate_draft",
    "show_run_progress",
    "display_proposed_change",
    "read_view",
)


def _safe_label(value: str) -> str:
    reason = unsafe_reason(value)
    if reason is not None:
        raise ValueError(reason)
    return value


# Free text is shown as text; only NUL is refused (it truncates strings in some sinks).
TEXT_REFUSED = r"\x00"
TEXT_REFUSAL = "must not contain NUL characters"
_TEXT_REFUSED = re.compile(TEXT_REFUSED)


def _plain_text(value: str) -> str:
    if _TEXT_REFUSED.search(value):
        raise ValueError(f"text {TEXT_REFUSAL}")
    return value


# Rules a JSON schema cannot say, named in the schema so the shim's generated copy of these
# models (`webmcp_js/tab-rules.js`) applies them too: a label passes `unsafe_reason`; plain
# text holds no NUL.
AS_LABEL = Field(json_schema_extra={"x-label": True})
AS_TEXT = Field(json_schema_extra={"x-text": True})

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")
]
ToolName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
]
# A model name like "gpt-4.1", "anthropic/claude-x" or "local:llama-3"; no "//" and no
# markup characters are possible by the pattern, and the label rule refuses pseudo-schemes.
ModelName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/@+-]+$"),
    AfterValidator(_safe_label),
    AS_LABEL,
]
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_safe_label), AS_LABEL
]
Title = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=r"^[^\r\n]+$"),
    AfterValidator(_plain_text),
    AS_TEXT,
]
Instructions = Annotated[
    str, StringConstraints(max_length=20_000), AfterValidator(_plain_text), AS_TEXT
]
Summary = Annotated[str, StringConstraints(max_length=4_000), AfterValidator(_plain_text), AS_TEXT]
Diff = Annotated[str, StringConstraints(max_length=60_000), AfterValidator(_plain_text), AS_TEXT]


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def args(self) -> dict[str, Any]:
        """What the page's handler receives: the fields without `type`."""
        return self.model_dump(mode="json", exclude={"type"}, exclude_none=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class OpenViewArgs(_Action):
    """Navigate the dashboard to one of the views the host app registered."""

    view: Identifier
    params: dict[str, Any] = Field(default_factory=dict)


class DraftFields(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Label | None = None
    instructions: Instructions | None = None
    model: ModelName | None = None
    tools: list[ToolName] | None = Field(default=None, max_length=64)


class PopulateDraftArgs(_Action):
    """Fill the agent builder's draft (never saves it: saving is a tool of the host app)."""

    agent_id: Identifier | None = None
    fields: DraftFields


class ShowRunProgressArgs(_Action):
    """Show the progress of an evaluation run."""

    run_id: Identifier


class DisplayProposedChangeArgs(_Action):
    """Show a change for the user to review; every field is displayed as plain text."""

    title: Title
    summary: Summary = ""
    diff: Diff = ""


class ReadViewArgs(_Action):
    """Ask the tab what it shows: `{view, params, revision, selection, available_actions}`."""


# The actions themselves: the arguments plus the `type` that names them on the wire. The
# `...Args` models are the inputs of the `ui.*` tools.
class OpenView(OpenViewArgs):
    type: Literal["open_view"] = "open_view"


class PopulateDraft(PopulateDraftArgs):
    type: Literal["populate_draft"] = "populate_draft"


class ShowRunProgress(ShowRunProgressArgs):
    type: Literal["show_run_progress"] = "show_run_progress"


class DisplayProposedChange(DisplayProposedChangeArgs):
    type: Literal["display_proposed_change"] = "display_proposed_change"


class ReadView(ReadViewArgs):
    type: Literal["read_view"] = "read_view"


UIAction = Annotated[
    OpenView | PopulateDraft | ShowRunProgress | DisplayProposedChange | ReadView,
    Field(discriminator="type"),
]
_ACTION = TypeAdapter[UIAction](UIAction)


def parse_action(raw: Any, views: Views) -> UIAction:
    """Validate a wire action against the allowlist and, for `open_view`, the view's schema.

    Raises `ValueError` (pydantic's `ValidationError` or a plain one) when it does not fit.
    """
    action = _ACTION.validate_python(raw)
    if isinstance(action, OpenView):
        params = views.validate(action.view, action.params)
        action = OpenView(view=action.view, params=params)
    return action


# `target_holds` as tables, so that the shim's copy (tab-rules.js) is this rule and not a
# second writing of it. `open_view` and `read_view` are absolute: they do not depend on
# where the page is. An action bound to something the page shows names it in a field,
# looked for under the same key in the view's params and selection.
ABSOLUTE_ACTIONS = ("open_view", "read_view")
BOUND_FIELDS: Mapping[str, str] = {"populate_draft": "agent_id"}
NAMING_PARTS = ("params", "selection")


def target_holds(action: UIAction, view: Mapping[str, Any]) -> bool:
    """Whether an action aimed at an older revision still fits the page's current view.

    `view` is what the tab reported: `{view, params, selection, available_actions?}`.
    - an absolute action (`open_view`, `read_view`) always holds;
    - an action the view no longer offers (its `available_actions` omits it) is stale;
    - `populate_draft` for a given agent is stale once neither the view's params nor its
      selection name that agent;
    - progress and proposed changes are overlays that fit any view.
    """
    if action.type in ABSOLUTE_ACTIONS:
        return True
    offered = view.get("available_actions")
    if isinstance(offered, list | tuple) and action.type not in offered:
        return False
    field = BOUND_FIELDS.get(action.type)
    bound = None if field is None else getattr(action, field, None)
    if field is None or bound is None:
        return True
    return any(
        isinstance(part, Mapping) and part.get(field) == bound
        for part in (view.get(name) for name in NAMING_PARTS)
    )


__all__ = [
    "ABSOLUTE_ACTIONS",
    "ACTION_TYPES",
    "BOUND_FIELDS",
    "NAMING_PARTS",
    "TEXT_REFUSAL",
    "TEXT_REFUSED",
    "DisplayProposedChange",
    "DisplayProposedChangeArgs",
    "DraftFields",
    "OpenView",
    "OpenViewArgs",
    "PopulateDraft",
    "PopulateDraftArgs",
    "ReadView",
    "ReadViewArgs",
    "ShowRunProgress",
    "ShowRunProgressArgs",
    "UIAction",
    "build_action",
    "parse_action",
    "target_holds",
]


def build_action(kind: str, args: BaseModel | Mapping[str, Any], views: Views) -> UIAction:
    """The action `kind` with these arguments (a `...Args` model or a plain mapping)."""
    fields = (
        args.model_dump(mode="json", exclude_none=True)
        if isinstance(args, BaseModel)
        else dict(args)
    )
    return parse_action({**fields, "type": kind}, views)
