"""The tab channel's wire frames (CONTRACT section 5): JSON text frames, one object each.

Incoming frames are parsed into closed pydantic models, so a frame with a missing or
mistyped field is refused as a whole. Outgoing frames are built by the small functions at
the end, so every frame the gateway sends has one place that spells it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

FRAME_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
TAB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
FrameId = Annotated[str, StringConstraints(pattern=FRAME_ID_PATTERN)]
TabId = Annotated[str, StringConstraints(pattern=TAB_ID_PATTERN)]
Revision = Annotated[int, Field(ge=0, le=2**53 - 1)]

# Close codes of the tab channel.
CLOSE_POLICY = 1008
CLOSE_TOO_LARGE = 1009
CLOSE_INTERNAL = 1011
CLOSE_SUPERSEDED = 4001
CLOSE_TASK_ENDED = 4002
CLOSE_TOKEN_EXPIRED = 4003
# The websocket's own "service restart": not final, the tab connects again (to the node
# that now holds its task).
CLOSE_MOVED = 1012


class _Frame(BaseModel):
    # Unknown keys are ignored rather than refused, so a newer shim can add fields.
    model_config = ConfigDict(frozen=True, extra="ignore")


class Hello(_Frame):
    type: Literal["hello"]
    token: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    tab_id: TabId
    revision: Revision = 0
    view: dict[str, Any] = Field(default_factory=dict)


def parse_hello(raw: Any) -> Hello:
    """The first frame, which must be a hello (raises ValueError otherwise)."""
    try:
        return Hello.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"the first frame must be a hello ({exc.error_count()} errors)") from None


class ReplyError(_Frame):
    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    message: Annotated[str, StringConstraints(max_length=1000)] = ""


class Reply(_Frame):
    type: Literal["reply"]
    id: FrameId
    task_id: Annotated[str, StringConstraints(max_length=128)]
    tab_id: Annotated[str, StringConstraints(max_length=128)]
    revision: Revision
    ok: bool
    result: dict[str, Any] | None = None
    error: ReplyError | None = None


class State(_Frame):
    type: Literal["state"]
    revision: Revision
    view: dict[str, Any]


class ToolCall(_Frame):
    type: Literal["tool_call"]
    id: FrameId
    tool: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    input: dict[str, Any] | None = None
    # "webmcp" when the page's WebMCP registration forwarded the call (recorded as the
    # door); anything else is the page's own assistant panel.
    via: Literal["webmcp", "page"] = "page"


class Cancel(_Frame):
    type: Literal["cancel"]
    id: FrameId


class Pong(_Frame):
    type: Literal["pong"]


class Approval(_Frame):
    """A person's answer to an `approval_request`, from the element the shim owns, bound to
    the request as it was shown (task, tab, revision, id) and its one-time nonce."""

    type: Literal["approval"]
    id: FrameId
    task_id: Annotated[str, StringConstraints(max_length=128)]
    tab_id: Annotated[str, StringConstraints(max_length=128)]
    revision: Revision
    nonce: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    decision: Literal["approve", "deny"]
    scope: Literal["call", "task"] = "call"


IncomingFrame = Annotated[
    Reply | State | ToolCall | Cancel | Pong | Approval | Hello, Field(discriminator="type")
]
INCOMING_TYPES = ("hello", "reply", "state", "tool_call", "cancel", "pong", "approval")
# The frames this module builds below, one function each.
OUTGOING_TYPES = (
    "welcome",
    "request",
    "cancel",
    "tool_result",
    "error",
    "bye",
    "ping",
    "approval_request",
    "approval_closed",
)


def welcome(
    task_id: str,
    tools: list[dict[str, Any]],
    views: list[dict[str, Any]],
    heartbeat_s: float,
    *,
    tab_id: str,
    revision: int,
    expires_at: float,
) -> dict[str, Any]:
    return {
        "type": "welcome",
        "task_id": task_id,
        "tab_id": tab_id,
        "revision": revision,
        "tools": tools,
        "views": views,
        "heartbeat_s": heartbeat_s,
        "expires_at": expires_at,
    }


def request(
    request_id: str, task_id: str, revision: int, action: dict[str, Any], expires_at: float
) -> dict[str, Any]:
    return {
        "type": "request",
        "id": request_id,
        "task_id": task_id,
        "revision": revision,
        "action": action,
        "expires_at": expires_at,
    }


def cancel(request_id: str, reason: str) -> dict[str, Any]:
    return {"type": "cancel", "id": request_id, "reason": reason}


def tool_result(call_id: str, result: dict[str, Any]) -> dict[str, Any]:
    # The pipeline's public result, with its own call id kept as `call_id`; `id` is the
    # page's id for the call.
    return {**result, "type": "tool_result", "id": call_id}


def error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, **extra}


def bye(reason: str) -> dict[str, Any]:
    return {"type": "bye", "reason": reason}


def ping() -> dict[str, Any]:
    return {"type": "ping"}


def approval_request(
    shown: dict[str, Any], task_id: str, tab_id: str, revision: int
) -> dict[str, Any]:
    """An approval for the shim to show. `shown` has `id`, `tool`, `summary`, `details`,
    `by`, `answerable`, `expires_at`, and `nonce` only when this tab may answer it."""
    return {
        **shown,
        "type": "approval_request",
        "task_id": task_id,
        "tab_id": tab_id,
        "revision": revision,
    }


def approval_closed(approval_id: str, status: str) -> dict[str, Any]:
    return {"type": "approval_closed", "id": approval_id, "status": status}
