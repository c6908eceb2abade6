"""The workspace operations do what a user of them would expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.errors import ToolFailure
from gateway.workspace import Workspace, files


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws")


def test_write_then_read_round_trips_text(ws: Workspace) -> None:
    first = files.write(ws, "a/b/c.txt", "héllo\nworld\n")
    assert first["created"] is True
    again = files.write(ws, "a/b/c.txt", "second\n")
    assert again["created"] is False
    read = files.read(ws, "a/b/c.txt")
    assert read["contents"] == "second\n"
    assert read["sha256"] == again["sha256"]
    assert not [p for p in (ws.root / "a" / "b").iterdir() if p.name.endswith(".tmp")]


def test_read_by_range(ws: Workspace) -> None:
    files.write(ws, "n.txt", "0123456789")
    part = files.read(ws, "n.txt", offset=3, limit=4)
    assert (part["contents"], part["truncated"], part["size"]) == ("3456", True, 10)


def test_read_refuses_binary(ws: Workspace) -> None:
    ws.ensure()
    (ws.root / "b.bin").write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ToolFailure) as exc:
        files.read(ws, "b.bin")
    assert exc.value.code == "invalid_input"


def test_edit_replaces_exactly_one_occurrence_or_says_why_not(ws: Workspace) -> None:
    files.write(ws, "f.py", "x = 1\ny = 1\n")
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "f.py", "= 1", "= 2")
    assert exc.value.code == "conflict"
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "f.py", "z = 1", "z = 2")
    assert exc.value.code == "conflict"
    done = files.edit(ws, "f.py", "y = 1", "y = 2")
    assert done["replacements"] == 1
    assert files.read(ws, "f.py")["contents"] == "x = 1\ny = 2\n"
    every = files.edit(ws, "f.py", "= ", "== ", replace_all=True)
    assert every["replacements"] == 2


def test_edit_checks_the_expected_hash(ws: Workspace) -> None:
    written = files.write(ws, "f.txt", "one")
    files.write(ws, "f.txt", "two")
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "f.txt", "two", "three", expected_sha256=written["sha256"])
    assert exc.value.code == "conflict"


def test_missing_files_are_not_found(ws: Workspace) -> None:
    with pytest.raises(ToolFailure) as exc:
        files.read(ws, "nope/x.txt")
    assert exc.value.code == "not_found"
    with pytest.raises(ToolFailure) as exc:
        files.write(ws, "nope/x.txt", "x", create_dirs=False)
    assert exc.value.code == "not_found"


def test_search_finds_lines_and_bounds_results(ws: Workspace) -> None:
    files.write(ws, "src/a.py", "needle one\nhay\nNEEDLE two\n")
    files.write(ws, "src/b.py", "needle three\n")
    files.write(ws, "docs/c.md", "needle four\n")
    found = files.search(ws, "needle", "src")
    assert [(m["path"], m["line"]) for m in found["matches"]] == [("src/a.py", 1), ("src/b.py", 1)]
    loose = files.search(ws, "needle", case_sensitive=False)
    assert len(loose["matches"]) == 4
    capped = files.search(ws, "needle", max_results=2)
    assert len(capped["matches"]) == 2
    assert capped["truncated"] is True
