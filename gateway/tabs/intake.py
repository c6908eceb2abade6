"""One frame from a tab, from the wire to a validated frame, or the reason it is refused.

The size rule, the rate rule's one exception (answers to what the gateway asked pass) and
the schema: what the frame then does is the channel's (`gateway/tabs/channel.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gateway.tabs import frames
from gateway.tabs.frames import IncomingFrame

_FRAME = TypeAdapter[IncomingFrame](IncomingFrame)


@dataclass(frozen=True)
class Refusal:
    """Why a frame is refused, and what of it the refusal names."""

    reason: str
    message: str
    frame_type: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    request_id: Any = None


def too_large(text: str | bytes, max_bytes: int) -> bool:
    # A str of n characters is at most 4n bytes: encode only when that could be too many.
    size = (
        len(text) if isinstance(text, bytes) or len(text) * 4 <= max_bytes else len(text.encode())
    )
    return size > max_bytes


def read(
    text: str | bytes, *, within_rate: bool, answers: Callable[[Any, Any], bool]
) -> IncomingFrame | Refusal:
    """The frame `text` holds. Beyond the rate (`within_rate` False) only a frame for which
    `answers(type, id)` holds passes: an answer to a request or an approval shown."""
    if isinstance(text, str) and '"reply"' in text:
        # Replies are most of what a busy tab sends: one that names itself a reply is
        # parsed and validated in one pass, straight from the text. Anything else, or a
        # reply that does not validate, takes the general path (which says why).
        try:
            reply = frames.Reply.model_validate_json(text)
        except ValueError:
            pass  # the general path below parses it again to say why
        else:
            if within_rate or answers("reply", reply.id):
                return reply
    if isinstance(text, bytes):
        return Refusal("invalid_frame", "frames are JSON text")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return Refusal("invalid_frame", "the frame is not valid JSON")
    if not within_rate and not (isinstance(raw, dict) and answers(raw.get("type"), raw.get("id"))):
        # Replies to this tab's pending requests are bounded by what the gateway sent,
        # so they pass; everything else beyond the rate is refused.
        return Refusal("rate_limited", "the tab is sending frames too fast")
    claimed_type = raw.get("type") if isinstance(raw, dict) else None
    frame_type = claimed_type if isinstance(claimed_type, str) else None
    try:
        return _FRAME.validate_python(raw)
    except ValidationError as exc:
        return Refusal(
            "invalid_frame",
            f"the frame does not match the {frame_type or 'tab'} frame schema",
            frame_type=frame_type,
            details={"errors": exc.error_count()},
            request_id=raw.get("id") if isinstance(raw, dict) else None,
        )
