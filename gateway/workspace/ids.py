"""The outward id map: canonical workspace tool ids to an external registry's names.

The bridge speaks canonical ids (`workspace.read`, ...). An adapter that dispatches to a
registry of its own naming (`fs_read`, `repo.search`...) maps them outward at its
boundary and back inward for results; the external registry never needs to know the
canonical ids. The map is one-to-one: two canonical ids never share an external name, so a
translated name always comes back to exactly one tool.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

CANONICAL_WORKSPACE_IDS = (
    "workspace.read",
    "workspace.search",
    "workspace.write",
    "workspace.edit",
)

_EXTERNAL = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


class OutwardIdMap:
    def __init__(
        self, outward: Mapping[str, str], canonical: Iterable[str] = CANONICAL_WORKSPACE_IDS
    ) -> None:
        known = set(canonical)
        for name, external in outward.items():
            if name not in known:
                raise ValueError(f"{name!r} is not a canonical id this map can translate")
            if not _EXTERNAL.match(external):
                raise ValueError(f"external id {external!r} is not a plain tool name")
            if external in known and external != name:
                raise ValueError(f"external id {external!r} is another tool's canonical id")
        inward: dict[str, str] = {}
        for name, external in outward.items():
            if external in inward:
                raise ValueError(
                    f"{inward[external]!r} and {name!r} would share the external id {external!r}"
                )
            inward[external] = name
        self._out = MappingProxyType(dict(outward))
        self._in = MappingProxyType(inward)

    @property
    def outward_ids(self) -> Mapping[str, str]:
        return self._out

    def to_external(self, canonical: str) -> str:
        """The external name of a canonical id; an unmapped id keeps its own name."""
        return self._out.get(canonical, canonical)

    def to_canonical(self, external: str) -> str | None:
        """The canonical id behind an external name, or None if it maps to none."""
        if external in self._in:
            return self._in[external]
        # An unmapped canonical id passes through unchanged, but a canonical id that has
        # an external name is not accepted under its canonical spelling (one name per tool).
        return external if external not in self._out and external not in self._in else None

    def translate_request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A parent-tool request with its tool (and allowlist) named the external way."""
        out = dict(request)
        out["tool"] = self.to_external(str(request.get("tool", "")))
        auth = request.get("authorization")
        if isinstance(auth, Mapping) and isinstance(auth.get("allowed_tools"), list):
            out["authorization"] = {
                **auth,
                "allowed_tools": [self.to_external(str(t)) for t in auth["allowed_tools"]],
            }
        return out

    def translate_result(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """A result from the external registry, named canonically again."""
        out = dict(result)
        canonical = self.to_canonical(str(result.get("tool", "")))
        if canonical is not None:
            out["tool"] = canonical
        return out
