"""The first workflow with each assistant task in a sandbox of its own, end to end.

The example app is committed into a throwaway repository (this working tree's files, so
the test runs what is here), registered as the gateway's `synthetic-app`, and every task
the dashboard creates gets the app at that commit, provisioned by each provider: `local`
(bubblewrap) and `incus` (a container of its own). Through the MCP door and through
WebMCP: the six operations reach their observable results, and the task's browser works on
its own sandbox (its origin, its data folder), which a second task's sandbox does not
share. At the end nothing of either sandbox is left running.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.test_first_workflow import door_for, new_page
from examples.synthetic_app.directory import USERS
from examples.synthetic_app.serve import SOURCE, ExampleStack, provision_for, running_stack
from examples.synthetic_app.store import AppStore, who
from examples.synthetic_app.workflow import open_assistant, run_workflow, sign_in
from gateway.core.tokens import Purpose
from gateway.sandbox.incus_sandbox import IncusSandbox
from gateway.sandbox.local import LocalSandbox, sandbox_processes
from gateway.sandbox.provider import SandboxHandle
from gateway.sandbox.service import Sandboxes
from gateway.testing import test_settings
from tests.browser.conftest import snapshot_ref
from tests.sandbox.conftest import INCUS_DEPLOYMENT, incus_socket

__all__ = ["incus_socket"]

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ADA = who("org_acme", "ada")


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
        "GIT_AUTHOR_NAME": "e2e",
        "GIT_AUTHOR_EMAIL": "e2e@example.invalid",
        "GIT_COMMITTER_NAME": "e2e",
        "GIT_COMMITTER_EMAIL": "e2e@example.invalid",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return done.stdout.decode().strip()


@pytest.fixture(scope="module")
def app_commit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This working tree's files, committed into a repository of their own."""
    repo = tmp_path_factory.mktemp("synthetic-app")
    listed = _git(SOURCE, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = SOURCE / name
        if source.is_file() and not source.is_symlink():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the example app")
    return repo, _git(repo, "rev-parse", "HEAD")


@pytest_asyncio.fixture(loop_scope="session", params=["local", "incus"])
async def example(
    request: pytest.FixtureRequest, tmp_path: Path, app_commit: tuple[Path, str]
) -> AsyncIterator[ExampleStack]:
    overrides: dict[str, Any] = {}
    if request.param == "incus":
        socket_path = request.getfixturevalue("incus_socket")
        overrides["sandbox_incus"] = {"socket": socket_path, "deployment": INCUS_DEPLOYMENT}
    settings = test_settings(tmp_path / "data", example=True, **overrides)
    repo, commit = app_commit
    provision = provision_for(settings, path=repo, commit=commit, step_s=0.05)
    async with running_stack(settings, step_s=0.05, provision=provision) as stack:
        yield stack


def sandbox_of(stack: ExampleStack, task_id: str) -> SandboxHandle:
    handle = stack.gateway.services.get(Sandboxes).handle_of(task_id)
    assert isinstance(handle, LocalSandbox | IncusSandbox)
    return handle


async def records_in(sandbox: SandboxHandle) -> set[str]:
    """The agents' names in the sandbox's own data (its SQLite file), read from outside."""
    if isinstance(sandbox, LocalSandbox):
        path = sandbox.data / "sandbox.db"
        return {a["name"] for a in await _agents(path)} if path.exists() else set()
    assert isinstance(sandbox, IncusSandbox)
    with tempfile.TemporaryDirectory() as folder:
        pulled = Path(folder) / "sandbox.db"
        # The database and its write-ahead log, where the newest rows are.
        for suffix in ("", "-wal"):
            done = await asyncio.create_subprocess_exec(
                "incus",
                "file",
                "pull",
                f"{sandbox.name}/data/sandbox.db{suffix}",
                f"{pulled}{suffix}",
                stderr=asyncio.subprocess.DEVNULL,
            )
            if await done.wait() != 0 and not suffix:
                return set()
        return {a["name"] for a in await _agents(pulled)}


def nothing_left_of(sandbox: SandboxHandle) -> None:
    if isinstance(sandbox, LocalSandbox):
        assert sandbox_processes(sandbox.uid, sandbox.pid_namespace) == []
    else:
        assert isinstance(sandbox, IncusSandbox)
        done = subprocess.run(["incus", "info", sandbox.name], capture_output=True, check=False)
        assert done.returncode != 0, "the container is still there"
        assert not sandbox.socket_path.exists()
    assert not sandbox.folder.exists()


@pytest.mark.parametrize("door_name", ["mcp", "webmcp"])
async def test_the_first_workflow_with_a_sandbox_per_task(
    dashboard_browser: Any,
    example: ExampleStack,
    app_commit: tuple[Path, str],
    door_name: str,
) -> None:
    assert example.sandbox is None  # no shared instance: each task has its own
    context, page = await new_page(dashboard_browser)
    try:
        await sign_in(page, example.dashboard_url, "ada")
        token = await open_assistant(page, example, "ada")
        identity = await example.gateway.tasks.authenticate(token, Purpose.AGENT)
        sandbox = sandbox_of(example, identity.task_id)
        assert identity.sandbox.app_origin == sandbox.origin
        assert identity.sandbox.provision is not None

        # The manifest: this commit, bound to this task, its owner and organization.
        described = await example.gateway.services.get(Sandboxes).probe(identity.task_id)
        assert described is not None
        manifest = described["manifest"]
        assert (manifest["repository"], manifest["commit"]) == ("synthetic-app", app_commit[1])
        assert manifest["bound_to"] == {
            "task_id": identity.task_id,
            "org_id": "org_acme",
            "owner": "ada",
            "expires_at": identity.expires_at.isoformat(),
        }

        async with door_for(door_name, example, page, token) as door:
            steps = await run_workflow(example, page, door, user="ada")
            assert [s.ok for s in steps] == [True] * 6, [s.observable for s in steps]

            # The same agent, through the same door, on the task's own app.
            opened = await door.call("browser.navigate", {"url": "/signin"})
            assert opened["status"] == "succeeded", opened
            assert opened["output"]["url"] == f"{sandbox.origin}/signin"
            assert "Sandbox instance" in opened["output"]["snapshot"]
            ref = snapshot_ref(opened["output"]["snapshot"], USERS["ada"].name)
            clicked = await door.call("browser.click", {"ref": ref})
            assert clicked["status"] == "succeeded", clicked
            new = await door.call("browser.navigate", {"url": "/agents/new"})
            name_ref = snapshot_ref(new["output"]["snapshot"], "Name")
            filled = await door.call(
                "browser.fill", {"ref": name_ref, "value": f"sandbox-only {door_name}"}
            )
            assert filled["status"] == "succeeded", filled
            save = snapshot_ref(new["output"]["snapshot"], "Save draft")
            saved = await door.call("browser.click", {"ref": save})
            assert saved["status"] == "succeeded", saved
            assert saved["output"]["url"].startswith(sandbox.origin)

        # The record is in this task's sandbox data (its own SQLite file), and nowhere else.
        names: set[str] = set()
        for _ in range(200):
            names = await records_in(sandbox)
            if f"sandbox-only {door_name}" in names:
                break
            await asyncio.sleep(0.05)
        assert f"sandbox-only {door_name}" in names
        dashboard_names = {a["name"] for a in await example.dashboard.store.list_agents(ADA)}
        assert f"sandbox-only {door_name}" not in dashboard_names

        # A second task (another user's) has a sandbox of its own, without that record.
        control = example.dashboard.control
        assert control is not None
        other = await control.task_for("second-session", USERS["max"])
        theirs = sandbox_of(example, other.task_id)
        assert theirs.origin != sandbox.origin
        assert f"sandbox-only {door_name}" not in await records_in(theirs)
        await control.end_session("second-session")
    finally:
        await context.close()
    # Every task of the dashboard ended: nothing of their sandboxes runs.
    control = example.dashboard.control
    assert control is not None
    await control.close()
    nothing_left_of(sandbox)
    nothing_left_of(theirs)


async def _agents(path: Path) -> list[dict[str, Any]]:
    store = AppStore(path)
    await store.start()
    try:
        return await store.list_agents(ADA)
    finally:
        await store.close()
