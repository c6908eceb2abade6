"""The outward id map: canonical workspace ids to an external registry's names and back."""

from __future__ import annotations

import pytest

from gateway.workspace import CANONICAL_WORKSPACE_IDS, OutwardIdMap

MAP = {
    "workspace.read": "fs_read",
    "workspace.search": "fs_grep",
    "workspace.write": "fs_write",
    "workspace.edit": "fs_patch",
}


def test_names_translate_both_ways() -> None:
    ids = OutwardIdMap(MAP)
    for canonical in CANONICAL_WORKSPACE_IDS:
        external = ids.to_external(canonical)
        assert external == MAP[canonical]
        assert ids.to_canonical(external) == canonical
    # A canonical id that has an external name is not accepted under its own spelling.
    assert ids.to_canonical("workspace.read") is None
    assert ids.to_canonical("fs_unknown") == "fs_unknown"


def test_requests_and_results_are_renamed_at_the_boundary() -> None:
    ids = OutwardIdMap(MAP)
    request = {
        "tool": "workspace.edit",
        "authorization": {"allowed_tools": ["workspace.read", "workspace.edit"]},
        "input": {"path": "a"},
    }
    outward = ids.translate_request(request)
    assert outward["tool"] == "fs_patch"
    assert outward["authorization"]["allowed_tools"] == ["fs_read", "fs_patch"]
    assert request["tool"] == "workspace.edit"  # the original is untouched
    assert ids.translate_result({"tool": "fs_patch", "status": "succeeded"})["tool"] == (
        "workspace.edit"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"workspace.delete": "fs_rm"},
        {"workspace.read": "fs_x", "workspace.write": "fs_x"},
        {"workspace.read": "has space"},
        {"workspace.read": "workspace.write"},
    ],
)
def test_an_ambiguous_or_foreign_map_is_refused(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"."):
        OutwardIdMap(bad)
