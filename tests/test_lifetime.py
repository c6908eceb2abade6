"""One lifetime: parts start in order and stop in reverse, a part that fails to start
unwinds every part started before it, and nothing is written before `start`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.app import default_extensions
from gateway.browser import BrowserPool
from gateway.browser.memory import process_tree
from gateway.core.errors import StorageError
from gateway.runtime import Gateway
from gateway.settings import Settings


def _settings(tmp_path: Path, **overrides: object) -> Settings:
    return Settings.model_validate(
        {"data_dir": tmp_path / "data", "example": False, "dashboard_origins": [], **overrides}
    )


def _open_files(name: str) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if name in target:
            found.append(target)
    return found


def _our_sockets() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


async def test_parts_stop_in_reverse_order(tmp_path: Path) -> None:
    gw = Gateway(_settings(tmp_path))
    seen: list[str] = []

    def part(name: str) -> None:
        async def start() -> None:
            seen.append(f"start {name}")

        async def stop() -> None:
            seen.append(f"stop {name}")

        gw.add_part(name, start=start, stop=stop)

    for name in ("a", "b", "c"):
        part(name)
    await gw.start()
    await gw.stop()
    assert seen == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


async def test_nothing_is_written_before_start(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    gw = Gateway(settings)
    assert not settings.data_dir.exists()
    await gw.start()
    try:
        assert {"secret.key", "control.key", "gateway.db"} <= {
            p.name for p in settings.data_dir.iterdir()
        }
    finally:
        await gw.stop()


async def test_a_part_that_fails_to_start_unwinds_everything_started(tmp_path: Path) -> None:
    gw = Gateway(_settings(tmp_path, browser_launch_at_start=True))
    for install in default_extensions():
        install(gw)
    started: dict[str, object] = {}
    sockets_before = _our_sockets()

    async def broken() -> None:
        pool = gw.services.get(BrowserPool)
        [process] = pool.processes.live()
        assert process.pid is not None
        started["browser"] = process_tree(process.pid)
        # The jail's guard socket (listening, in the browser's network) and its control
        # socket, among others.
        started["sockets"] = _our_sockets() - sockets_before
        started["database"] = _open_files("gateway.db")
        raise RuntimeError("this part cannot start")

    gw.add_part("broken", start=broken)
    with pytest.raises(RuntimeError, match="cannot start"):
        await gw.start()
    # The parts had been running: a Chromium, listening sockets, the database.
    assert started["browser"] and started["sockets"] and started["database"]
    # And nothing of them is left.
    browser = started["browser"]
    assert isinstance(browser, list)
    left = browser
    for _ in range(100):  # helpers (crashpad) exit a moment after the browser
        left = _alive(browser)
        if not left:
            break
        await asyncio.sleep(0.05)
    assert left == []
    assert _our_sockets() - sockets_before == set()
    assert _open_files("gateway.db") == []
    with pytest.raises(StorageError):
        gw.store.engine  # noqa: B018
