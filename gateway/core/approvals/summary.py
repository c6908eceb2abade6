"""What a person reads of a call: a plain, bounded text, with the call's secrets masked."""

from __future__ import annotations

import json
from typing import Any

from gateway.core.nested import Where, rebuilt

SUMMARY_CHARS = 2000


def without(value: Any, hidden: list[str]) -> Any:
    """`value` with each of the `hidden` strings, wherever they occur, made `[secret]`."""
    if not hidden:
        return value

    def masked(text: str, where: Where) -> str:
        for secret in hidden:
            text = text.replace(secret, "[secret]")
        return text

    return rebuilt(value, masked)


def text_only(summary: str) -> str:
    """What a person reads: plain text, bounded, no control characters but newlines."""
    cleaned = "".join(ch for ch in summary if ch == "\n" or ch.isprintable())
    return cleaned[:SUMMARY_CHARS]


def default_summary(title: str, tool: str, validated_input: Any) -> str:
    shown = json.dumps(validated_input, ensure_ascii=False, sort_keys=True)
    if len(shown) > 600:
        shown = shown[:600] + "…"
    return f"{title} ({tool}) with {shown}"
