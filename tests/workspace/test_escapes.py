"""Workspace escapes, tried from the attacker's side on a real filesystem.

Each attack is a path a sandbox could send, or a link an earlier step (a checked-out
repository, a previous tool) could have planted inside the workspace. None may read,
write or reveal anything outside the task's directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.core.errors import ToolFailure
from gateway.core.results import ToolStatus
from gateway.workspace import Workspace, files

SECRET = "outside-secret-contents"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret.txt").write_text(SECRET)
    return target


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path / "workspaces" / "o_org" / "task_1")
    workspace.ensure()
    return workspace


def refused(exc: pytest.ExceptionInfo[ToolFailure]) -> None:
    assert exc.value.tool_status is ToolStatus.DENIED
    assert exc.value.code == "forbidden"
    assert SECRET not in exc.value.message


HOSTILE_PATHS = [
    "../outside/secret.txt",
    "a/../../outside/secret.txt",
    "./../outside/secret.txt",
    "..",
    "/etc/passwd",
    "//etc/passwd",
    "\\..\\outside\\secret.txt",
    "a\\..\\..\\x",
    "C:\\Windows\\win.ini",
    "c:/x",
    "~/.ssh/id_rsa",
    "a\x00b",
    "ok\n../x",
    "tab\tname",
    "",
    ".",
    "./",
    "a/" * 40 + "x",
    "x" * 300,
    "a/" + "y" * 1100,
]


@pytest.mark.parametrize("path", HOSTILE_PATHS, ids=repr)
def test_hostile_paths_are_refused_for_every_operation(
    ws: Workspace, outside: Path, path: str
) -> None:
    attempts: list[Callable[[], object]] = [
        lambda: files.read(ws, path),
        lambda: files.write(ws, path, "pwned"),
        lambda: files.edit(ws, path, SECRET, "pwned"),
    ]
    for attempt in attempts:
        with pytest.raises(ToolFailure) as exc:
            attempt()
        refused(exc)
    assert (outside / "secret.txt").read_text() == SECRET
    assert not list(ws.root.parent.parent.parent.glob("**/pwned"))


def test_a_planted_directory_link_leads_nowhere(ws: Workspace, outside: Path) -> None:
    (ws.root / "link").symlink_to(outside, target_is_directory=True)
    attempts: list[Callable[[], object]] = [
        lambda: files.read(ws, "link/secret.txt"),
        lambda: files.write(ws, "link/secret.txt", "pwned"),
        lambda: files.write(ws, "link/new.txt", "pwned"),
        lambda: files.edit(ws, "link/secret.txt", SECRET, "pwned"),
        lambda: files.search(ws, "outside", "link"),
    ]
    for attempt in attempts:
        with pytest.raises(ToolFailure) as exc:
            attempt()
        refused(exc)
    assert (outside / "secret.txt").read_text() == SECRET
    assert not (outside / "new.txt").exists()


def test_a_planted_file_link_is_refused_and_never_written_through(
    ws: Workspace, outside: Path
) -> None:
    (ws.root / "notes.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolFailure) as exc:
        files.read(ws, "notes.txt")
    refused(exc)
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "notes.txt", SECRET, "pwned")
    refused(exc)
    with pytest.raises(ToolFailure) as exc:
        files.write(ws, "notes.txt", "pwned")
    refused(exc)
    assert (outside / "secret.txt").read_text() == SECRET


def test_a_deeper_link_on_the_way_is_refused(ws: Workspace, outside: Path) -> None:
    (ws.root / "a" / "b").mkdir(parents=True)
    (ws.root / "a" / "b" / "up").symlink_to(outside)
    with pytest.raises(ToolFailure) as exc:
        files.read(ws, "a/b/up/secret.txt")
    refused(exc)
    with pytest.raises(ToolFailure) as exc:
        files.write(ws, "a/b/up/deeper/x.txt", "pwned")
    refused(exc)
    assert not (outside / "deeper").exists()


def test_a_hard_link_to_an_outside_file_is_refused(ws: Workspace, outside: Path) -> None:
    os.link(outside / "secret.txt", ws.root / "alias.txt")
    with pytest.raises(ToolFailure) as exc:
        files.read(ws, "alias.txt")
    refused(exc)
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "alias.txt", SECRET, "pwned")
    refused(exc)
    with pytest.raises(ToolFailure) as exc:
        files.write(ws, "alias.txt", "pwned")
    refused(exc)
    assert (outside / "secret.txt").read_text() == SECRET


def test_a_fifo_or_a_directory_is_not_read(ws: Workspace) -> None:
    os.mkfifo(ws.root / "pipe")
    (ws.root / "dir").mkdir()
    for path in ("pipe", "dir"):
        with pytest.raises(ToolFailure) as exc:
            files.read(ws, path)  # a FIFO would block forever if it were opened for reading
        refused(exc)


def test_search_never_follows_links_out(ws: Workspace, outside: Path) -> None:
    (ws.root / "src").mkdir()
    (ws.root / "src" / "main.py").write_text(f"print('{SECRET[:7]} inside')\n")
    (ws.root / "src" / "linked_dir").symlink_to(outside, target_is_directory=True)
    (ws.root / "src" / "linked_file.txt").symlink_to(outside / "secret.txt")
    found = files.search(ws, SECRET[:7])
    assert [m["path"] for m in found["matches"]] == ["src/main.py"]
    assert SECRET not in str(found)


def test_outputs_name_files_relative_to_the_workspace(ws: Workspace) -> None:
    written = files.write(ws, "docs/./guide.md", "hello\n")
    read = files.read(ws, "docs/guide.md")
    found = files.search(ws, "hello")
    edited = files.edit(ws, "docs/guide.md", "hello", "bye")
    for output in (written, read, found, edited):
        assert str(ws.root) not in str(output)
    assert written["path"] == read["path"] == "docs/guide.md"
    assert found["matches"][0]["path"] == "docs/guide.md"


def test_oversized_inputs_are_refused(ws: Workspace) -> None:
    with pytest.raises(ToolFailure) as exc:
        files.write(ws, "big.txt", "x" * (files.WRITE_MAX_BYTES + 1))
    assert exc.value.code == "payload_too_large"
    (ws.root / "huge.txt").write_bytes(b"a" * (files.EDIT_MAX_FILE_BYTES + 1))
    with pytest.raises(ToolFailure) as exc:
        files.edit(ws, "huge.txt", "a", "b")
    assert exc.value.code == "payload_too_large"
    # Reading a large file is bounded, not refused.
    read = files.read(ws, "huge.txt", limit=10)
    assert read["contents"] == "a" * 10
    assert read["truncated"] is True
