"""From inside the sandbox: what the app tries and cannot do.

The app is the probe app (`probe_app.py`) at a commit of a throwaway repository, run by the
local provider in real bubblewrap. Every attempt is made by the app itself; the tests
check its outcome from both sides (the app's report, and the foreign server's log or the
host's files).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gateway.sandbox.bubblewrap import MIB
from gateway.sandbox.service import Sandboxes
from gateway.testing import LiveGateway
from tests.sandbox.conftest import AppRepo, ask, handle, provision


@pytest_asyncio.fixture
async def foreign() -> AsyncIterator[tuple[int, list[str]]]:
    """A server on the host's loopback that logs every connection it gets."""
    log: list[str] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        log.append(str(writer.get_extra_info("peername")))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], log


async def test_the_app_reaches_no_loopback_port_and_resolves_no_name(
    live: LiveGateway, app_repo: AppRepo, foreign: tuple[int, list[str]]
) -> None:
    port, log = foreign
    task_id = (await provision(live, app_repo.v1))["task_id"]
    gateway_port = int(live.base_url.rsplit(":", 1)[1])
    for target in (port, gateway_port):
        tried = await ask(live, task_id, f"/connect?port={target}")
        assert not tried["ok"], tried
        assert "ConnectionRefused" in tried["error"] or "unreachable" in tried["error"]
    for name in ("example.com", "localhost", "sbx-0.sandbox.internal"):
        resolved = await ask(live, task_id, f"/resolve?name={name}")
        assert not resolved["ok"], resolved
    assert log == []


async def test_the_app_cannot_write_its_checkout_nor_see_the_gateway_or_other_sandboxes(
    live: LiveGateway, app_repo: AppRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_CONTROL_KEY", "a-secret-of-the-gateway")
    mine = (await provision(live, app_repo.v1, env={"GREETING": "hi"}))["task_id"]
    other = (await provision(live, app_repo.v2))["task_id"]
    sandbox, neighbour = handle(live, mine), handle(live, other)
    data_dir: Path = live.gateway.settings.data_dir.resolve()

    for path in ("/app/VERSION", "/app/new-file"):
        wrote = await ask(live, mine, f"/write?path={path}")
        assert not wrote["ok"] and "Read-only file system" in wrote["error"], wrote
    assert (sandbox.checkout / "VERSION").read_text() == "v1\n"
    assert (await ask(live, mine, "/write?path=/data/note"))["ok"]
    assert (sandbox.data / "note").exists()

    listing = await ask(live, mine, "/list?path=/")
    # Only the system's folders, and the top of the gateway's own interpreter (bound
    # read-only for a Python app), wherever this checkout of the gateway lies.
    runtime_tops = {Path(prefix).parts[1] for prefix in (sys.prefix, sys.base_prefix)}
    assert set(listing["result"]) <= runtime_tops | {
        "app",
        "data",
        "tmp",
        "proc",
        "dev",
        "run",
        "usr",
        "etc",
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "root",
    }, listing
    # Above the interpreter, each folder holds the way down to it and nothing else.
    prefixes = [Path(prefix) for prefix in (sys.prefix, sys.base_prefix)]
    system = {Path("/"), Path("/usr"), Path("/tmp")}
    for prefix in prefixes:
        for folder in prefix.parents:
            if folder in system or any(folder.is_relative_to(s) for s in system - {Path("/")}):
                continue
            below = {p.relative_to(folder).parts[0] for p in prefixes if folder in p.parents}
            listed = await ask(live, mine, f"/list?path={folder}")
            assert set(listed["result"]) == below, (folder, listed)
    for secret in (
        data_dir / "secret.key",
        data_dir / "control.key",
        data_dir / "gateway.db",
        neighbour.data,
        neighbour.checkout / "VERSION",
        Path("/etc/shadow"),
        Path("/root/.ssh"),
    ):
        seen = await ask(live, mine, f"/read?path={secret}")
        assert not seen["ok"], (secret, seen)
    # The data folder it sees is its own only.
    await ask(live, other, "/write?path=/data/theirs")
    assert (await ask(live, mine, "/list?path=/data"))["result"] == ["note"]
    # Its processes are its own: nothing of the gateway or the other sandbox.
    processes = (await ask(live, mine, "/list?path=/proc"))["result"]
    assert len([p for p in processes if p.isdigit()]) <= 3

    env = await ask(live, mine, "/env")
    assert env["GREETING"] == "hi"
    assert not [name for name in env if name.startswith("GATEWAY")]
    assert "a-secret-of-the-gateway" not in str(env)
    assert set(env) <= {
        "GREETING",
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_CTYPE",
        "PWD",
        "SANDBOX_ID",
        "SANDBOX_COMMIT",
        "SANDBOX_ORIGIN",
        "SANDBOX_DATA",
        "SANDBOX_LISTEN_FD",
    }, env
    me = await ask(live, mine, "/whoami")
    assert me["uid"] == sandbox.uid != 0
    assert me["groups"] == []


async def test_the_limits_stop_the_app(live: LiveGateway, app_repo: AppRepo) -> None:
    limits = {"processes": 12, "memory_mb": 256, "file_size_mb": 2}
    task_id = (await provision(live, app_repo.v1, limits=limits))["task_id"]
    forked = await ask(live, task_id, "/fork?n=200&reap=1")
    assert forked["ok"], forked
    assert forked["result"]["forked"] < 12
    assert "Resource temporarily unavailable" in forked["result"]["stopped_by"]

    allocated = await ask(live, task_id, "/alloc?mb=512")
    assert not allocated["ok"] and "MemoryError" in allocated["error"], allocated

    written = await ask(live, task_id, "/bigfile?mb=8")
    assert not written["ok"] and "File too large" in written["error"], written
    assert (handle(live, task_id).data / "big").stat().st_size <= 2 * MIB


async def test_an_app_over_its_cpu_time_is_killed_and_restarted_once(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    task_id = (await provision(live, app_repo.v1, limits={"cpu_s": 1}))["task_id"]
    sandbox = handle(live, task_id)
    with contextlib.suppress(Exception):
        await ask(live, task_id, "/spin", wait_s=10)
    sandboxes = live.gateway.services.get(Sandboxes)
    for _ in range(600):
        if sandbox.restarts == 1 and sandbox.state == "healthy":
            break
        await asyncio.sleep(0.05)
    assert (sandbox.restarts, sandbox.state) == (1, "healthy")
    [died] = await live.evidence(task_id, "sandbox.restarting")
    # Killed by SIGXCPU (its soft limit) or SIGKILL (its hard one), as bwrap reports it.
    assert died["data"]["exit_code"] != 0
    assert (await ask(live, task_id, "/version"))["version"] == "v1"
    identity = (await live.gateway.tasks.get(task_id)).identity
    assert sandboxes.unavailable(identity) is None


async def test_the_app_cannot_make_a_user_namespace_and_still_runs_programs_and_threads(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    task_id = (await provision(live, app_repo.v1))["task_id"]
    for how in ("unshare", "clone"):
        tried = await ask(live, task_id, f"/userns?how={how}")
        assert not tried["ok"] and "Operation not permitted" in tried["error"], (how, tried)
    # clone3's flags are in memory the filter cannot read: it is refused whatever they are.
    tried = await ask(live, task_id, "/userns?how=clone3")
    assert not tried["ok"] and "Function not implemented" in tried["error"], tried
    tried = await ask(live, task_id, "/userns?how=command")
    assert not tried["ok"] and "unshare failed: Operation not permitted" in tried["error"], tried

    # clone3 is refused as unknown, and the C library falls back to clone: programs and
    # threads still start.
    spawned = await ask(live, task_id, "/spawn")
    assert spawned["ok"], spawned
    assert spawned["result"]["thread"] == ["ran"]
    assert spawned["result"]["program"] == str(handle(live, task_id).uid)
    answer = (await live.http.get(f"/v1/tasks/{task_id}", headers=live.control)).json()
    assert "seccomp:no-user-namespaces" in answer["sandbox"]["manifest"]["enforced_by"]
