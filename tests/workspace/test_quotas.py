"""The workspace quota, from the sandbox's side: the bridge's real HTTP door, a real disk.

Every refusal is `denied`/`quota_exceeded` with its numbers (which quota, its limit, what
the workspace holds, what the call would add), and leaves the workspace as it was: the
files already there read back unchanged, and nothing new (file, directory, temporary
file) is on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import bridge
from gateway.app import Extension, build_app
from gateway.bridge import BridgeClient, ParentToolResult, load_bridge, sandbox_env_values
from gateway.http import health, tasks
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.settings import Settings
from gateway.testing import task_body, test_settings
from gateway.workspace.quota import scan
from tests.conftest import Live, LiveFactory

MAX_BYTES = 1000
MAX_FILES = 6
EXTENSIONS: list[Extension] = [health.routes, tasks.routes, bridge.install]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return test_settings(
        tmp_path / "data", workspace_max_bytes=MAX_BYTES, workspace_max_files=MAX_FILES
    )


@pytest.fixture
async def live(settings: Settings, live_factory: LiveFactory) -> AsyncIterator[Live]:
    async with live_factory(settings, extensions=EXTENSIONS) as running:
        yield running


class Sandbox:
    """A task's sandbox: its bridge client, and (for the checks) its workspace on disk."""

    def __init__(self, base_url: str, created: dict[str, Any], data_dir: Path) -> None:
        envelope = load_bridge(created["parent_tool_bridge"])
        env = sandbox_env_values(envelope, created["tokens"]["bridge"])
        assert envelope.dispatcher.endpoint is not None
        env[envelope.dispatcher.endpoint.url_env] = f"{base_url}/v1/parent-tools"
        self.client = BridgeClient.from_envelope(envelope, env=env)
        self.root = data_dir / "workspaces" / "o_org_a" / created["task_id"]

    async def write(self, path: str, contents: str) -> ParentToolResult:
        return await self.client.call("workspace.write", {"path": path, "contents": contents})

    async def edit(self, path: str, old: str, new: str) -> ParentToolResult:
        return await self.client.call("workspace.edit", {"path": path, "old": old, "new": new})

    async def read(self, path: str) -> str:
        result = await self.client.call("workspace.read", {"path": path})
        assert result.ok, result
        contents: str = result.output["contents"]
        return contents

    def on_disk(self) -> dict[str, str]:
        """Every entry under the workspace ("dir/" for directories), with its digest."""
        found: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root)
            for name in dirnames:
                found[f"{(rel / name).as_posix()}/"] = ""
            for name in filenames:
                found[(rel / name).as_posix()] = hashlib.sha256(
                    (Path(dirpath) / name).read_bytes()
                ).hexdigest()
        return found


async def sandbox(live: Live) -> Sandbox:
    created = await live.create_task(scopes=("workspace:read", "workspace:write"))
    return Sandbox(live.base_url, created, live.gateway.settings.data_dir)


def refused(result: ParentToolResult, quota: str, *, current: int, adding: int) -> None:
    """`denied`/`quota_exceeded`, its numbers in the details and in the message."""
    limit = MAX_BYTES if quota == "workspace_bytes" else MAX_FILES
    assert result.status == "denied", result
    assert result.error is not None and result.error.code == "quota_exceeded"
    assert result.error.retryable is False
    assert result.diagnostics["details"] == {
        "quota": quota,
        "limit": limit,
        "current": current,
        "adding": adding,
    }
    for number in (limit, current, adding):
        assert str(number) in result.error.message


async def test_a_write_past_the_byte_limit_is_refused_and_changes_nothing(live: Live) -> None:
    box = await sandbox(live)
    assert (await box.write("notes/a.md", "a" * 600)).ok
    before = box.on_disk()

    over = await box.write("notes/b.md", "b" * 401)
    refused(over, "workspace_bytes", current=600, adding=401)
    deeper = await box.write("new/dir/c.md", "c" * 500)
    refused(deeper, "workspace_bytes", current=600, adding=500)

    assert box.on_disk() == before  # no b.md, no new/dir, no temporary file
    assert await box.read("notes/a.md") == "a" * 600
    # Exactly at the limit is within it.
    assert (await box.write("notes/b.md", "b" * 400)).ok


async def test_a_single_write_larger_than_the_whole_quota_is_refused(live: Live) -> None:
    box = await sandbox(live)
    refused(await box.write("big.txt", "x" * 1001), "workspace_bytes", current=0, adding=1001)
    assert box.on_disk() == {}


async def test_overwriting_charges_only_the_difference_and_a_smaller_file_frees_room(
    live: Live,
) -> None:
    box = await sandbox(live)
    assert (await box.write("a.txt", "a" * 900)).ok
    refused(await box.write("b.txt", "b" * 200), "workspace_bytes", current=900, adding=200)

    # The same file rewritten larger is charged its growth only.
    assert (await box.write("a.txt", "A" * 1000)).ok
    refused(await box.write("a.txt", "A" * 1001), "workspace_bytes", current=1000, adding=1)
    assert await box.read("a.txt") == "A" * 1000

    assert (await box.write("a.txt", "a" * 100)).ok  # shrinking is allowed at the limit
    assert (await box.write("b.txt", "b" * 200)).ok
    refused(await box.write("a.txt", "a" * 901), "workspace_bytes", current=300, adding=801)
    assert (await box.read("a.txt"), await box.read("b.txt")) == ("a" * 100, "b" * 200)
    # What the gateway counts is what the disk holds.
    assert scan(box.root).bytes == 300


async def test_a_refused_write_can_be_retried_with_its_key_once_there_is_room(
    live: Live,
) -> None:
    box = await sandbox(live)
    assert (await box.write("a.txt", "a" * 900)).ok
    ask = {"path": "b.txt", "contents": "b" * 500}
    first = await box.client.call("workspace.write", ask, request_id="ptr_quota_retry")
    refused(first, "workspace_bytes", current=900, adding=500)
    assert (await box.write("a.txt", "a")).ok
    # A refusal is not a recorded result: the same request runs for real this time.
    again = await box.client.call("workspace.write", ask, request_id="ptr_quota_retry")
    assert again.ok, again
    assert await box.read("b.txt") == "b" * 500


async def test_an_edit_that_grows_the_file_past_the_limit_leaves_it_as_it_was(
    live: Live,
) -> None:
    box = await sandbox(live)
    text = "x" * 990 + "KEY"
    assert (await box.write("f.txt", text)).ok
    before = box.on_disk()

    grown = await box.edit("f.txt", "KEY", "KEY" + "y" * 10)
    refused(grown, "workspace_bytes", current=993, adding=10)
    assert await box.read("f.txt") == text
    assert box.on_disk() == before

    assert (await box.edit("f.txt", "KEY", "K" + "z" * 9)).ok  # 993 -> 1000: at the limit
    assert (await box.edit("f.txt", "z" * 9, "")).ok  # shrinking frees room
    assert (await box.write("g.txt", "g" * 9)).ok
    refused(await box.write("h.txt", "h"), "workspace_bytes", current=1000, adding=1)


async def test_entries_count_files_and_the_directories_made_for_them(live: Live) -> None:
    box = await sandbox(live)
    assert (await box.write("a/b/c/d.txt", "d")).ok  # a, a/b, a/b/c and d.txt: 4
    assert (await box.write("e.txt", "e")).ok  # 5
    before = box.on_disk()

    refused(await box.write("a/x/y/z.txt", "z"), "workspace_files", current=5, adding=3)
    refused(await box.write("q/r.txt", "r"), "workspace_files", current=5, adding=2)
    assert box.on_disk() == before  # not one directory of the refused paths made
    assert (await box.write("a/b/c/d.txt", "replaced")).ok  # replacing adds no entry
    assert (await box.write("a/b/f.txt", "f")).ok  # 6, the limit
    refused(await box.write("g.txt", "g"), "workspace_files", current=6, adding=1)
    assert await box.read("a/b/c/d.txt") == "replaced"
    assert scan(box.root).files == MAX_FILES


async def test_concurrent_writes_to_one_workspace_cannot_overshoot(live: Live) -> None:
    box = await sandbox(live)
    results = await asyncio.gather(*(box.write(f"f{i}.txt", "x" * 300) for i in range(10)))
    statuses = sorted(r.status for r in results)
    assert statuses == ["denied"] * 7 + ["succeeded"] * 3
    for result in results:
        if not result.ok:
            assert result.error is not None and result.error.code == "quota_exceeded"
    assert scan(box.root).bytes == 900
    assert len(box.on_disk()) == 3


async def test_each_task_has_a_quota_of_its_own(live: Live) -> None:
    full, other = await sandbox(live), await sandbox(live)
    assert (await full.write("a.txt", "a" * 1000)).ok
    refused(await full.write("b.txt", "b"), "workspace_bytes", current=1000, adding=1)
    assert (await other.write("a.txt", "a" * 1000)).ok


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """A gateway over HTTP that, unlike `live`, leaves its tasks live when it stops, as a
    gateway being restarted does."""
    app = build_app(gateway=Gateway(settings), extensions=EXTENSIONS)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield base_url, http


async def test_a_restarted_gateway_counts_what_the_workspace_already_holds(
    settings: Settings, live_factory: LiveFactory
) -> None:
    control = {"authorization": f"Bearer {settings.control_key}"}
    async with served(settings) as (base_url, http):
        answer = await http.post(
            "/v1/tasks",
            json=task_body(scopes=("workspace:read", "workspace:write")),
            headers=control,
        )
        assert answer.status_code == 201, answer.text
        created = answer.json()
        first = Sandbox(base_url, created, settings.data_dir)
        assert (await first.write("a.txt", "a" * 700)).ok
        assert (await first.write("d/b.txt", "b" * 200)).ok
    # Something the first process did not write, left in the workspace (a crash's
    # temporary file, say): the count after a restart is what is on disk.
    (first.root / ".a.txt.0123.tmp").write_bytes(b"t" * 50)

    async with live_factory(settings, extensions=EXTENSIONS) as live:
        again = Sandbox(live.base_url, created, settings.data_dir)
        refused(await again.write("c.txt", "c" * 51), "workspace_bytes", current=950, adding=51)
        refused(await again.write("e/f/g.txt", ""), "workspace_files", current=4, adding=3)
        assert (await again.write("c.txt", "c" * 50)).ok
        assert await again.read("a.txt") == "a" * 700
