"""What an app (or a task's commit) could still take of the gateway's machine around its
budgets, tried for real from inside a sandbox: a deep chain of folders, files unlinked but
held open, System V shared memory and memfds, kernel calls an app has no need for, the
kernel keyring a later sandbox on the same uid would see, and a commit whose abbreviation
a branch name shadows."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import io
import os
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import data_archive, tree
from gateway.sandbox.checkout import extract
from gateway.sandbox.commit_tree import MAX_CHECKOUT_DEPTH, resolve_commit
from gateway.sandbox.errors import SandboxRefused, UnknownCommit
from gateway.testing import live_gateway
from gateway.testing.waiting import until, until_true
from tests.sandbox.conftest import (
    UID_BASE,
    AppRepo,
    ask,
    git,
    handle,
    local_provider,
    provision,
    sandbox_settings,
)
from tests.sandbox.test_attacks import blob, crafted_repo, mktree

MIB = 1024 * 1024
# Deeper than Python's recursion limit (1,000) lets a recursive walk go.
DEEP = 1200
# This file's gateways: a uid block of their own (conftest: +32 and +64 are others').
BASE = UID_BASE + 96


@pytest.fixture(autouse=True)
def no_deep_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a test's outcome, nothing deep or mounted is left in pytest's folders: its
    own clean-up of old folders recurses (and would fail on them for every later run)."""
    yield
    for point in reversed(mounts_below(tmp_path)):
        subprocess.run(["umount", "-l", point], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path)], check=False)


def chain(top: Path, depth: int) -> Path:
    """`depth` nested folders below `top`, made without ever holding a long path."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as fh:
            fh.write(b"left by an app")
    finally:
        os.close(fd)
    return top


def mounts_below(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    return [p for p in points if p.startswith(prefix)]


# -- a deep folder ----------------------------------------------------------------------


async def test_a_deep_folder_neither_escapes_the_data_budget_nor_keeps_its_slot(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(
        tmp_path / "data",
        app_repo,
        sandbox_uid_base=BASE,
        sandbox_max_live=2,
        sandbox_budgets={"data_bytes": 8 * MIB},
    )
    async with live_gateway(settings) as live:
        for _ in range(3):  # two slots: a third task needs one freed by the first two
            task_id = (await provision(live, app_repo.v1))["task_id"]
            sandbox = handle(live, task_id)
            made = await ask(live, task_id, f"/deep?n={DEEP}&mb=40")
            assert made["ok"], made
            # The kernel stops the write at the budget, whatever the folder's depth.
            assert "No space left on device" in made["result"].get("stopped_by", ""), made
            await live.end_task(task_id)
            assert not sandbox.folder.exists()
            [torn] = await live.evidence(task_id, "sandbox.torn_down")
            assert torn["data"]["processes_left"] == 0
        assert mounts_below(settings.sandbox_root) == []


async def test_a_gateway_starts_over_whatever_an_app_left(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=BASE)
    root = settings.sandbox_root
    # What a gateway that died mid-task leaves: a deep chain in a data folder, and a data
    # folder still mounted.
    (root / "sbx-deep" / "data").mkdir(parents=True)
    chain(root / "sbx-deep" / "data", DEEP)
    mounted = root / "sbx-mounted" / "data"
    mounted.mkdir(parents=True)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mount(b"tmpfs", bytes(mounted), b"tmpfs", 0, b"size=1m") == 0
    chain(mounted, 10)
    async with live_gateway(settings) as live:
        assert sorted(p.name for p in root.iterdir()) == []
        assert mounts_below(root) == []
        task_id = (await provision(live, app_repo.v1))["task_id"]
        assert (await ask(live, task_id, "/version"))["version"] == "v1"


def test_a_folder_deeper_than_recursion_goes_is_archived_and_removed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "kept").write_bytes(b"near the top")
    chain(data, 3 * DEEP)
    archive, note = data_archive.archive(data, MIB)
    assert archive is not None and note is not None
    assert f"deeper than {data_archive.ARCHIVE_MAX_DEPTH}" in note
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
        kept = tar.extractfile("data/kept")
        assert kept is not None and kept.read() == b"near the top"
    # The deepest folder walked is listed with its entries (a folder among them, whose own
    # entries are left out).
    assert max(name.count("/") for name in names) == data_archive.ARCHIVE_MAX_DEPTH + 1
    tree.remove(data)
    assert not data.exists()


def test_removal_never_follows_a_link_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"host file")
    data = tmp_path / "data"
    data.mkdir()
    chain(data, 5)
    (data / "d" / "link").symlink_to(outside)
    tree.remove(data)
    assert not data.exists()
    assert (outside / "keep").read_bytes() == b"host file"


def test_a_checkout_of_a_deep_tree_is_refused(tmp_path: Path) -> None:
    repo = crafted_repo(tmp_path)
    tree = mktree(repo, [("100644", "blob", blob(repo, "deep\n"), "f")])
    for _ in range(1100):
        tree = mktree(repo, [("040000", "tree", tree, "d")])
    commit = git(repo, "commit-tree", "-m", "deep", tree)
    dest = tmp_path / "checkout"
    dest.mkdir()
    with pytest.raises(SandboxRefused, match="deeper") as deep:
        extract(repo, commit, dest)
    assert deep.value.details == {"field": "commit", "max_depth": MAX_CHECKOUT_DEPTH}
    assert list(dest.iterdir()) == []


# -- files the meter never saw ----------------------------------------------------------


async def test_files_unlinked_but_held_open_count_against_the_data_budget(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(
        tmp_path / "data", app_repo, sandbox_uid_base=BASE, sandbox_budgets={"data_bytes": 8 * MIB}
    )
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1))["task_id"]
        held = await ask(live, task_id, "/hold?n=4&mb=16")
        assert held["ok"], held
        assert held["result"]["held_mb"] <= 8, held
        assert "No space left on device" in held["result"]["stopped_by"]


# -- memory no address-space limit counts -----------------------------------------------


async def test_shared_memory_and_memfds_hold_nothing_past_the_limits(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=BASE)
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1, limits={"memory_mb": 128}))["task_id"]
        shm = await ask(live, task_id, "/shm?mb=400")
        memfd = await ask(live, task_id, "/memfd?mb=300")
        sem = await ask(live, task_id, "/sem?sets=200")
        assert sem["result"]["sets"] == 0 and sem["result"]["errno"] == errno.ENOSYS, sem
        assert shm["result"] == {
            "held_mb": 0,
            "stopped_by": os.strerror(errno.ENOSYS),
            "errno": errno.ENOSYS,
        }, shm
        assert memfd["result"]["held_mb"] == 0, memfd
        assert memfd["result"]["errno"] == errno.ENOSYS
        # What the manifest says of it: the limits the kernel holds, read back from the
        # running jail, and what nothing holds on this host.
        manifest = handle(live, task_id).manifest
        enforced = manifest["enforced"]
        budgets = local_provider(live).config.sandboxes.budgets
        assert enforced["data"] == {
            "by": "tmpfs",
            "bytes": budgets.data_bytes,
            "entries": budgets.data_entries,
        }
        assert enforced["tmp"]["by"] == "tmpfs"
        assert enforced["tmp"]["bytes"] == budgets.tmp_bytes
        assert {"memfd_create", "shmget", "msgget"} <= set(enforced["refused_calls"])
        assert enforced["rlimits"]["address_space_bytes"] == 128 * MIB
        assert (enforced["no_new_privs"], enforced["capabilities"]) == (True, "none")
        # No cgroup is delegated here: the manifest says memory_mb is per process only.
        assert enforced["cgroup"] is None
        assert any("memory_mb (128)" in line for line in manifest["not_enforced"]), manifest


async def test_the_manifest_says_what_the_running_jail_lacks(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    # Read back, not assumed: a jail started without the filter is said to lack it.
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=BASE)
    async with live_gateway(settings) as live:
        local_provider(live).seccomp = None
        task_id = (await provision(live, app_repo.v1))["task_id"]
        manifest = handle(live, task_id).manifest
        assert manifest["enforced"]["refused_calls"] == []
        assert "seccomp:no-user-namespaces" not in manifest["enforced_by"]
        assert any("no system-call filter" in line for line in manifest["not_enforced"])
        assert (await ask(live, task_id, "/memfd?mb=16"))["result"] == {"held_mb": 16}


# -- kernel calls ------------------------------------------------------------------------

REFUSED = (
    "io_uring_setup",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "pidfd_open",
    "memfd_create",
    "shmget",
    "msgget",
    "semget",
)


async def test_kernel_calls_an_app_has_no_need_for_are_refused(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("no filter is written for this architecture")
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=BASE)
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1))["task_id"]
        outcome: dict[str, Any] = {}
        for name in REFUSED:
            outcome[name] = await ask(live, task_id, f"/syscall?name={name}")
        refused = {name: o.get("error", "") for name, o in outcome.items()}
        assert all("[Errno 38]" in e for e in refused.values()), outcome
        # What an app does every day still runs.
        spawned = await ask(live, task_id, "/spawn")
        assert spawned["ok"] and spawned["result"]["thread"] == ["ran"], spawned


async def test_a_key_one_sandbox_stores_is_not_read_by_the_next_on_its_uid(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    settings = sandbox_settings(
        tmp_path / "data", app_repo, sandbox_uid_base=BASE, sandbox_max_live=1
    )
    async with live_gateway(settings) as live:
        first = (await provision(live, app_repo.v1))["task_id"]
        uid = handle(live, first).uid
        stored = await ask(live, first, "/key?do=store")
        await live.end_task(first)
        second = (await provision(live, app_repo.v1))["task_id"]
        assert handle(live, second).uid == uid  # the one slot, used again
        read = await ask(live, second, "/key?do=read")
        assert "org-a-secret" not in str(read), read
        assert not stored["ok"] and "[Errno 38]" in stored["error"], stored
        assert not read["ok"], read


# -- a commit a branch name shadows -------------------------------------------------------


def test_a_commit_abbreviation_a_branch_name_shadows_is_refused(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    repo = tmp_path / "shadowed"
    git(tmp_path, "clone", "-q", str(app_repo.path), str(repo))
    short = app_repo.v1[:12]
    # A branch named like v1's abbreviation, pointing at v2: git reads the name as the ref.
    git(repo, "branch", short, app_repo.v2)
    with pytest.raises(UnknownCommit, match="ambiguous"):
        resolve_commit(repo, short)
    dest = tmp_path / "checkout"
    dest.mkdir()
    with pytest.raises(UnknownCommit):
        extract(repo, short, dest)
    assert list(dest.iterdir()) == []
    # Its full id means the commit, whatever the branches are called.
    assert resolve_commit(repo, app_repo.v1)[0] == app_repo.v1


# -- a namespace number used again ----------------------------------------------------------


def pid_namespace_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


async def test_a_teardown_never_kills_whoever_got_its_namespace_number(
    tmp_path: Path, app_repo: AppRepo
) -> None:
    # The kernel hands a freed namespace's number to a later namespace (the lowest free
    # one first): a sandbox that knew its PID namespace by number alone would take
    # whoever got it next for its own, and kill it at teardown.
    settings = sandbox_settings(tmp_path / "data", app_repo, sandbox_uid_base=BASE)
    others: list[subprocess.Popen[bytes]] = []
    async with live_gateway(settings) as live:
        task_id = (await provision(live, app_repo.v1))["task_id"]
        sandbox = handle(live, task_id)
        number = sandbox.pid_namespace
        sandbox.restarts = 1  # it stays down once it dies
        assert sandbox.process is not None
        os.kill(sandbox.process.pid, signal.SIGKILL)  # its init, and so all of it, dies
        await until(lambda: sandbox.state == "down", "the app is down")
        try:
            # Other processes, each in a PID namespace of its own, made until one has
            # the sandbox's number (or the kernel kept it from being used again).
            reused = False
            for _ in range(64):
                others.append(await _in_own_pid_namespace())
                if await _namespace_of_child(others[-1]) == number:
                    reused = True
                    break
            await live.end_task(task_id)
            killed = [o.pid for o in others if o.poll() is not None]
            assert killed == [], f"killed by the teardown (its number was reused: {reused})"
        finally:
            for other in others:
                other.kill()
                other.wait()


async def _in_own_pid_namespace() -> subprocess.Popen[bytes]:
    return await asyncio.to_thread(subprocess.Popen, ["unshare", "--pid", "--fork", "sleep", "120"])


async def _namespace_of_child(process: subprocess.Popen[bytes]) -> int:
    found: list[int] = []

    async def started() -> bool:
        found[:] = [
            int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == process.pid
        ]
        return bool(found)

    await until_true(started, "the process in its own namespace started")
    return pid_namespace_of(found[0])


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
