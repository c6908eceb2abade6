"""What a task (or the app it runs) could do to the gateway's machine through its sandbox,
tried for real: a crafted commit writing outside its checkout or too much, an app filling
the disk, a jail escaping teardown, a data archive reading host files."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import data_archive
from gateway.sandbox.bubblewrap import jail_marker, setenv
from gateway.sandbox.checkout import extract
from gateway.sandbox.errors import SandboxRefused
from gateway.sandbox.local import LocalSandbox, sandbox_processes
from gateway.sandbox.local_folder import ID_VARIABLE
from gateway.testing import LiveGateway, live_gateway
from tests.sandbox.conftest import (
    UID_BASE,
    AppRepo,
    ask,
    git,
    handle,
    local_provider,
    provision,
    provision_body,
    sandbox_settings,
)
from tests.sandbox.test_provision import nothing_left, refused

MIB = 1024 * 1024


# -- a crafted commit ---------------------------------------------------------------------


def mktree(repo: Path, entries: list[tuple[str, str, str, str]]) -> str:
    """A tree of exactly `entries` (mode, type, id, name), duplicates and all: `git mktree`
    takes what a checkout never would."""
    listing = "".join(f"{mode} {kind} {oid}\t{name}\n" for mode, kind, oid, name in entries)
    return subprocess.run(
        ["git", "-C", str(repo), "mktree"],
        input=listing,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def crafted_commit(repo: Path, entries: list[tuple[str, str, str, str]]) -> str:
    """A commit of such a tree; reachable from no ref, it is still asked for by its id."""
    return git(repo, "commit-tree", "-m", "crafted", mktree(repo, entries))


def blob(repo: Path, content: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
        input=content,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def crafted_repo(root: Path) -> Path:
    repo = root / "crafted-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo


async def test_a_commit_writing_through_its_own_link_is_refused_and_writes_nothing(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    # The link `a` points at a folder of the host; `a/x` would then be written there, as
    # root, by a checkout that follows it.
    target = tmp_path / "host-folder"
    target.mkdir()
    repo = crafted_repo(tmp_path)
    payload = blob(repo, "written by the commit\n")
    inner = mktree(repo, [("100644", "blob", payload, "x")])
    through_link = crafted_commit(
        repo,
        [("120000", "blob", blob(repo, str(target)), "a"), ("040000", "tree", inner, "a")],
    )
    through_file = crafted_commit(
        repo, [("100644", "blob", payload, "a"), ("040000", "tree", inner, "a")]
    )
    twice = crafted_commit(
        repo, [("100644", "blob", payload, "x"), ("100755", "blob", payload, "x")]
    )
    registered = {"crafted": {"path": str(repo), "command": ["{python}", "app.py"]}}
    settings = sandbox_settings(tmp_path / "data", app_repo, repositories=registered)
    async with live_gateway(settings) as live:
        for commit in (through_link, through_file, twice):
            error = await refused(live, provision_body(commit, repository="crafted"))
            assert (error["code"], error["http"]) == ("sandbox_refused", 422), error
            assert error["details"]["field"] == "commit"
            nothing_left(live)
        assert "twice" in error["message"]
    assert list(target.iterdir()) == []


def test_even_past_the_listing_a_checkout_never_writes_through_a_link(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    # Whatever the tree, a folder of the checkout is opened without following a link: a
    # link put where a folder is expected (here by hand) is refused, not written through.
    target = tmp_path / "host-folder"
    target.mkdir()
    dest = tmp_path / "checkout"
    dest.mkdir()
    repo = crafted_repo(tmp_path)
    payload = blob(repo, "x\n")
    inner = mktree(repo, [("100644", "blob", payload, "x")])
    commit = crafted_commit(repo, [("040000", "tree", inner, "a")])
    real_mkdir = os.mkdir

    def mkdir_then_link(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        if path == "a" and dir_fd is not None:
            os.symlink(target, "a", dir_fd=dir_fd)  # as if it had been written before
            raise FileExistsError(path)
        real_mkdir(path, mode, dir_fd=dir_fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "mkdir", mkdir_then_link)
        with pytest.raises(SandboxRefused, match="not a folder"):
            extract(repo, commit, dest)
    assert list(target.iterdir()) == []
    assert list(dest.iterdir()) == []


def test_a_commit_over_the_checkout_budget_is_refused_and_leaves_nothing(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    dest = tmp_path / "checkout"
    dest.mkdir()
    with pytest.raises(SandboxRefused, match="bytes") as too_big:
        extract(app_repo.path, app_repo.v1, dest, max_bytes=100)
    assert too_big.value.details == {"field": "commit", "max_bytes": 100}
    with pytest.raises(SandboxRefused, match="more than 1 files"):
        extract(app_repo.path, app_repo.v1, dest, max_files=1)
    assert list(dest.iterdir()) == []
    # Within the budget, the same commit is written.
    written = extract(app_repo.path, app_repo.v1, dest, max_bytes=1 * MIB, max_files=2)
    assert (written.files, sorted(p.name for p in dest.iterdir())) == (2, ["VERSION", "app.py"])


async def test_a_commit_over_the_gateways_checkout_budget_is_refused(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(
        tmp_path / "data",
        app_repo,
        sandbox_uid_base=UID_BASE + 64,
        sandbox_budgets={"checkout_bytes": 100},
    )
    async with live_gateway(settings) as live:
        error = await refused(live, provision_body(app_repo.v1))
        assert (error["code"], error["details"]["field"]) == ("sandbox_refused", "commit")
        assert error["details"]["max_bytes"] == 100
        nothing_left(live)


# -- an app filling the disk ------------------------------------------------------------


async def test_an_app_writing_past_its_data_budget_gets_no_space(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(
        tmp_path / "data", app_repo, sandbox_budgets={"data_bytes": 2 * MIB}
    )
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1))["task_id"]
        # Each file within the file size limit; together past the budget: the kernel
        # refuses the write that would go past it, and the app goes on serving.
        outcomes = [await ask(live, task_id, f"/fill?path=/data/{n}&mb=1") for n in ("a", "b", "c")]
        assert [o["ok"] for o in outcomes[:1]] == [True]
        assert any("No space left on device" in o.get("error", "") for o in outcomes), outcomes
        assert (await ask(live, task_id, "/version"))["version"] == "v1"
        assert handle(live, task_id).state == "healthy"


async def test_an_app_making_files_past_its_entries_budget_gets_no_space(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_budgets={"data_entries": 3})
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1))["task_id"]
        made = [await ask(live, task_id, f"/write?path=/data/{n}") for n in range(5)]
        assert [o["ok"] for o in made] == [True, True, True, False, False], made
        assert "No space left on device" in made[3]["error"]


async def test_tmp_is_bounded_too(tmp_path: Path, app_repo: AppRepo) -> None:
    # A tmpfs of a fixed size: a write past it fails.
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_budgets={"tmp_bytes": MIB})
    async with live_gateway(settings) as live:
        sized = (await provision(live, app_repo.v1))["task_id"]
        full = await ask(live, sized, "/fill?path=/tmp/big&mb=4")
        assert not full["ok"] and "No space left on device" in full["error"], full
        assert handle(live, sized).manifest["enforced"]["tmp"]["bytes"] == 1 * MIB


# -- a jail escaping teardown -------------------------------------------------------------


async def test_a_jail_started_as_its_watcher_is_cancelled_is_killed(
    live: LiveGateway, app_repo: AppRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = (await provision(live, app_repo.v1))["task_id"]
    sandbox = handle(live, task_id)
    real_spawn = asyncio.create_subprocess_exec
    spawned: list[asyncio.subprocess.Process] = []
    ready = asyncio.Event()

    async def spawn(*argv: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await real_spawn(*argv, **kwargs)
        if argv[0] == "prlimit":
            # Held where bubblewrap still runs as root, before the sandbox's uid: a
            # sweep by uid cannot find it. The teardown's cancellation lands while the
            # spawn has not returned yet.
            os.kill(process.pid, 19)  # SIGSTOP
            spawned.append(process)
            ready.set()
            await asyncio.sleep(0.5)
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    with contextlib.suppress(Exception):
        await ask(live, task_id, "/exit", wait_s=5)  # the watcher starts it again
    await asyncio.wait_for(ready.wait(), 30)
    await live.end_task(task_id)
    [jail] = spawned
    # Killed by the teardown, not left stopped (or running) with nobody knowing it.
    assert await asyncio.wait_for(jail.wait(), 10) == -9
    marker = jail_marker(ID_VARIABLE, sandbox.sandbox_id)
    assert sandbox_processes(sandbox.uid, None, marker) == []


async def test_a_jail_left_setting_up_as_root_is_killed_at_teardown(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    # What a jail killed while it set up can leave: its namespace's first process, still
    # root, in a namespace nobody was told of, waiting for a parent that is gone. Neither
    # the sandbox's uid nor its namespace finds it; its arguments say whose it is. A
    # process started with the same arguments stands in for it.
    task_id = (await provision(live, app_repo.v1))["task_id"]
    sandbox = handle(live, task_id)
    # The sweep by the jail's arguments finds the real jail (no uid is -1): the stand-in
    # below stands for something.
    assert sandbox.process is not None
    marker = jail_marker(ID_VARIABLE, sandbox.sandbox_id)
    assert sandbox.process.pid in sandbox_processes(-1, None, marker)
    left = with_jail_arguments(sandbox.sandbox_id)
    try:
        await live.end_task(task_id)
        assert await exited(left) == -9
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


def with_jail_arguments(sandbox_id: str) -> subprocess.Popen[bytes]:
    """A root process, in a session of its own, started with a sandbox jail's arguments."""
    script = "import time; time.sleep(300)"
    arguments = setenv(ID_VARIABLE, sandbox_id)
    return subprocess.Popen([sys.executable, "-c", script, *arguments], start_new_session=True)


def as_sandbox_uid(uid: int) -> subprocess.Popen[bytes]:
    """A process of a sandbox uid no gateway knows of (an orphaned jail's app)."""
    return subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"]
    )


async def exited(process: subprocess.Popen[bytes]) -> int | None:
    for _ in range(200):
        if process.poll() is not None:
            return process.returncode
        await asyncio.sleep(0.05)
    process.kill()
    process.wait()
    return None


async def test_processes_left_of_sandbox_uids_are_killed_before_the_uids_are_used(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    base = UID_BASE + 32
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=base)
    planted = [as_sandbox_uid(base + 3)]
    try:
        async with live_gateway(settings) as live:
            assert await exited(planted[0]) == -9  # at the gateway's start
            planted.append(as_sandbox_uid(base))
            task_id = (await provision(live, app_repo.v1))["task_id"]
            assert handle(live, task_id).uid == base
            assert await exited(planted[1]) == -9  # before its slot's uid was used again
            assert (await ask(live, task_id, "/version"))["version"] == "v1"
    finally:
        for process in planted:  # whatever the outcome, none is left running or unreaped
            if process.poll() is None:
                process.kill()
            process.wait()


# -- the data archive ---------------------------------------------------------------------


async def test_data_is_not_kept_when_a_process_outlives_teardown(
    live: LiveGateway, app_repo: AppRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = (await provision(live, app_repo.v1, keep_data=True))["task_id"]
    await ask(live, task_id, "/write?path=/data/note")
    provider = local_provider(live)
    real_kill = provider._kill

    async def one_survives(sandbox: LocalSandbox) -> int:
        await real_kill(sandbox)
        return 1  # as if the kernel kept one (it could still swap a file for a link)

    monkeypatch.setattr(provider, "_kill", one_survives)
    await live.end_task(task_id)
    [torn] = await live.evidence(task_id, "sandbox.torn_down")
    assert torn["data"]["processes_left"] == 1
    assert "data" not in torn["data"]
    assert "not kept" in torn["data"]["data_note"]


def test_the_archive_never_reads_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"TOPSECRET" * 100)
    data = tmp_path / "data"
    data.mkdir()
    victim = data / "victim"
    victim.write_bytes(b"harmless")
    real_open, real_tar_open = os.open, tarfile.bltn_open  # type: ignore[attr-defined]
    swapped: list[bool] = []

    def swap(name: Any) -> None:
        # What a process left in the sandbox can do between the archiver's look at the
        # file and its open: put a link to a host file in its place.
        if os.path.basename(os.fsdecode(name)) == "victim" and not swapped:
            swapped.append(True)
            victim.unlink()
            victim.symlink_to(secret)

    def hooked_open(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if not flags & (os.O_WRONLY | os.O_RDWR):
            swap(name)
        return real_open(name, flags, *args, **kwargs)

    def hooked_tar_open(name: Any, *args: Any, **kwargs: Any) -> Any:
        swap(name)
        return real_tar_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", hooked_open)
    monkeypatch.setattr(tarfile, "bltn_open", hooked_tar_open)
    archive, _note = data_archive.archive(data, MIB)
    monkeypatch.undo()
    assert swapped and archive is not None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            content = tar.extractfile(member)
            assert content is None or b"TOPSECRE" not in content.read(), member.name


def test_the_archive_keeps_links_as_links(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "file").write_bytes(b"kept")
    (data / "shadow").symlink_to("/etc/shadow")
    os.mkfifo(data / "fifo")  # never opened: it would block
    archive, note = data_archive.archive(data, MIB)
    assert archive is not None and note is None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        link = tar.getmember("data/shadow")
        assert (link.issym(), link.linkname) == (True, "/etc/shadow")
        kept = tar.extractfile("data/sub/file")
        assert kept is not None and kept.read() == b"kept"
        assert "data/fifo" not in tar.getnames()
