"""The one way down a nested JSON value: for each rule that reads or rewrites every string
inside one (masking a call's secrets, condensing what evidence keeps, checking labels).

A mapping comes back as a dict and a list or tuple as a list; anything else is kept. The walk
is bounded in depth, so a value nested without end cannot exhaust the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Where a value sits inside the one walked: mapping keys (as text) and list indexes.
Where = tuple[str | int, ...]
# Deeper than any value a call sends or returns in earnest.
MAX_DEPTH = 64


def kept(value: Any, where: Where) -> Any:
    """What is given back for a value deeper than the bound, unless told otherwise: itself."""
    return value


def rebuilt(
    value: Any,
    leaf: Callable[[str, Where], Any],
    *,
    max_depth: int = MAX_DEPTH,
    beyond: Callable[[Any, Where], Any] = kept,
    keys: bool = False,
    _depth: int = 0,
    _where: Where = (),
) -> Any:
    """`value` with each string in it replaced by `leaf(string, where)`.

    A value more than `max_depth` levels down is `beyond(value, where)` and is not walked.
    With `keys`, each mapping key (as text) is a string one level down at its mapping's
    place, and its new key is what `leaf` gives for it."""
    if _depth > max_depth:
        return beyond(value, _where)
    if isinstance(value, str):
        return leaf(value, _where)

    def down(item: Any, where: Where) -> Any:
        return rebuilt(
            item,
            leaf,
            max_depth=max_depth,
            beyond=beyond,
            keys=keys,
            _depth=_depth + 1,
            _where=where,
        )

    if isinstance(value, Mapping):
        return {
            # A key sits one level down, at its mapping's place.
            (down(str(key), _where) if keys else key): down(item, (*_where, str(key)))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [down(item, (*_where, index)) for index, item in enumerate(value)]
    return value
