"""The browsers folder that hands the machine's ffmpeg to Playwright's driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.browser import ffmpeg


def test_the_folder_links_the_revision_the_driver_looks_for_to_the_machines_ffmpeg(
    tmp_path: Path,
) -> None:
    machine = ffmpeg.find_ffmpeg()
    revision = ffmpeg.ffmpeg_revision()
    assert machine is not None, "scripts/ensure-browser installs Debian's ffmpeg"
    assert revision is not None and revision.isdigit()
    root = ffmpeg.browsers_path(tmp_path)
    assert root == tmp_path.resolve() / ffmpeg.FOLDER
    link = root / f"ffmpeg-{revision}" / "ffmpeg-linux"
    assert link.resolve() == machine
    # A link left pointing elsewhere (an ffmpeg since removed) is mended.
    link.unlink()
    link.symlink_to(tmp_path / "gone")
    assert ffmpeg.browsers_path(tmp_path) == root
    assert link.resolve() == machine


def test_the_driver_alone_gets_the_folder_and_a_hosts_own_path_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ffmpeg.BROWSERS_PATH_ENV, raising=False)
    with ffmpeg.driver_environment(tmp_path):
        assert os.environ[ffmpeg.BROWSERS_PATH_ENV] == str(tmp_path.resolve() / ffmpeg.FOLDER)
    assert ffmpeg.BROWSERS_PATH_ENV not in os.environ
    monkeypatch.setenv(ffmpeg.BROWSERS_PATH_ENV, "/opt/browsers")
    with ffmpeg.driver_environment(tmp_path):
        assert os.environ[ffmpeg.BROWSERS_PATH_ENV] == "/opt/browsers"
    assert os.environ[ffmpeg.BROWSERS_PATH_ENV] == "/opt/browsers"


def test_a_data_folder_that_cannot_hold_the_link_leaves_the_driver_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ffmpeg.BROWSERS_PATH_ENV, raising=False)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with ffmpeg.driver_environment(blocked):
        assert ffmpeg.BROWSERS_PATH_ENV not in os.environ
