"""The `incus` provider, tried from the app's side as `local` is: the network, the files,
the other sandboxes, the limits (shared memory and memfds included), what is left after
teardown, and what a killed gateway left. A real Incus daemon, real containers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import BaseModel

from gateway.runtime import Gateway
from gateway.sandbox.incus import IncusProvider
from gateway.sandbox.incus_sandbox import IncusSandbox
from gateway.sandbox.service import Sandboxes
from gateway.serving import free_port
from gateway.settings import Settings
from gateway.testing import LiveGateway, live_gateway
from gateway.testing.waiting import until, until_true
from tests.sandbox.conftest import (
    INCUS_DEPLOYMENT,
    AppRepo,
    git,
    incus_settings,
    provision_body,
    sandbox_settings,
)

MIB = 1024 * 1024
# A container is made, started and asked for its health within one create.
PROVISION_TIMEOUT_S = 120.0


@pytest_asyncio.fixture
async def live(tmp_path: Path, app_repo: AppRepo, incus_socket: str) -> AsyncIterator[LiveGateway]:
    async with live_gateway(incus_settings(tmp_path / "data", app_repo, incus_socket)) as gw:
        yield gw


async def provision(live: LiveGateway, commit: str, **provision: Any) -> dict[str, Any]:
    body = provision_body(commit, provider="incus", **provision)
    response = await live.http.post(
        "/v1/tasks", json=body, headers=live.control, timeout=PROVISION_TIMEOUT_S
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    live.created.append(created["task_id"])
    return created


def sandbox_of(gateway: Gateway, task_id: str) -> IncusSandbox:
    found = gateway.services.get(Sandboxes).handle_of(task_id)
    assert isinstance(found, IncusSandbox)
    return found


async def ask(sandbox: IncusSandbox, path: str, wait_s: float = 30.0) -> Any:
    """What the app answers `path` with, through the socket the guard uses."""
    transport = httpx.AsyncHTTPTransport(uds=str(sandbox.socket_path))
    async with httpx.AsyncClient(transport=transport, timeout=wait_s) as client:
        response = await client.get(f"{sandbox.origin}{path}")
    assert response.status_code == 200, response.text
    return json.loads(response.text)


def containers() -> list[str]:
    done = subprocess.run(
        ["incus", "list", "--format", "json"], check=True, capture_output=True, text=True
    )
    return [
        i["name"]
        for i in json.loads(done.stdout)
        if (i.get("config") or {}).get("user.gateway.deployment") == INCUS_DEPLOYMENT
    ]


async def test_two_tasks_at_two_commits_and_a_manifest_read_back_from_the_kernel(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    one = await provision(live, app_repo.v1, limits={"memory_mb": 128, "processes": 16})
    two = await provision(live, app_repo.v2)
    first, second = (
        sandbox_of(live.gateway, one["task_id"]),
        sandbox_of(live.gateway, two["task_id"]),
    )
    assert (await ask(first, "/version"))["version"] == "v1"
    assert (await ask(second, "/version"))["version"] == "v2"
    answer = (await live.http.get(f"/v1/tasks/{one['task_id']}", headers=live.control)).json()
    manifest = answer["sandbox"]["manifest"]
    assert manifest["provider"] == "incus" and manifest["commit"] == app_repo.v1
    enforced = manifest["enforced"]
    # What the kernel holds, not what was asked: the cgroup's limit, the tmpfs sizes.
    assert enforced["cgroup"]["memory.max"] == 128 * MIB
    assert enforced["cgroup"]["pids.max"] == "17"  # and the container's init
    assert enforced["data"]["bytes"] == live.gateway.settings.sandbox_budgets.data_bytes
    assert enforced["network"] == ["lo"]
    assert enforced["user_namespaces"] == "refused"
    assert enforced["uid"] == 1000 and enforced["container"] == {"privileged": False}
    assert "keyctl" in enforced["refused_calls"]
    assert set(containers()) >= {first.name, second.name}


async def test_the_app_reaches_no_port_nor_name_nor_another_sandbox(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    mine = sandbox_of(live.gateway, (await provision(live, app_repo.v1))["task_id"])
    theirs = sandbox_of(live.gateway, (await provision(live, app_repo.v2))["task_id"])
    gateway_port = int(live.base_url.rsplit(":", 1)[1])
    for port in (gateway_port, 22):
        tried = await ask(mine, f"/connect?port={port}")
        assert not tried["ok"] and "ConnectionRefused" in tried["error"], tried
    for name in ("example.com", "localhost.localdomain", theirs.origin.split("//")[1]):
        assert not (await ask(mine, f"/resolve?name={name}"))["ok"]
    # Its checkout is read-only; its data is its own.
    wrote = await ask(mine, "/write?path=/app/VERSION")
    assert not wrote["ok"] and "Read-only file system" in wrote["error"], wrote
    assert (await ask(theirs, "/write?path=/data/theirs"))["ok"]
    assert (await ask(mine, "/list?path=/data"))["result"] == []
    data_dir = live.gateway.settings.data_dir.resolve()
    for secret in (data_dir / "secret.key", data_dir / "control.key", theirs.socket_path):
        assert not (await ask(mine, f"/read?path={secret}"))["ok"], secret
    processes = [p for p in (await ask(mine, "/list?path=/proc"))["result"] if p.isdigit()]
    assert len(processes) <= 3  # its init and itself: nothing of the host or the other
    me = await ask(mine, "/whoami")
    assert me["uid"] == 1000 and me["groups"] == []
    env = await ask(mine, "/env")
    assert not [name for name in env if name.startswith("GATEWAY")]


async def test_memory_holds_against_shared_memory_memfds_and_unlinked_files(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    task = await provision(live, app_repo.v1, limits={"memory_mb": 128})
    sandbox = sandbox_of(live.gateway, task["task_id"])
    provider = live.gateway.services.get(Sandboxes).providers.get("incus")
    assert isinstance(provider, IncusProvider)
    for attack in ("/memfd?mb=320", "/shm?mb=320", "/hold?n=1&mb=320"):
        restarts = sandbox.restarts
        try:
            tried = await ask(sandbox, attack)
        except httpx.HTTPError:
            tried = {"ok": False, "error": "killed"}  # the kernel's OOM killer
        # Never held past the limit: stopped short, or the app was killed for it.
        if tried["ok"]:
            assert tried["result"]["held_mb"] < 128, (attack, tried)
        state = await provider.incus.state(sandbox.name)
        assert state["memory"]["usage"] <= 128 * MIB, (attack, state["memory"])
        if tried.get("error") == "killed":
            await until(lambda r=restarts: sandbox.restarts > r, what="a restart")  # type: ignore[misc]
            break  # its one restart is spent


async def test_data_and_tmp_are_bounded_by_the_kernel(
    tmp_path: Path, app_repo: AppRepo, incus_socket: str
) -> None:
    budgets = {"data_bytes": 8 * MIB, "tmp_bytes": 4 * MIB}
    settings = incus_settings(tmp_path / "data", app_repo, incus_socket, sandbox_budgets=budgets)
    async with live_gateway(settings) as live:
        sandbox = sandbox_of(live.gateway, (await provision(live, app_repo.v1))["task_id"])
        for folder, mb in (("/data", 8), ("/tmp", 4)):
            filled = await ask(sandbox, f"/fill?path={folder}/big&mb={mb * 2}")
            assert not filled["ok"] and "No space left" in filled["error"], filled
        # Unlinked and held open, the bytes are still the filesystem's.
        held = (await ask(sandbox, "/hold?n=1&mb=16"))["result"]
        assert held["held_mb"] <= 8 and "No space left" in held["stopped_by"], held
        # The app is still up: a full disk is the app's problem, not the gateway's.
        assert (await ask(sandbox, "/version"))["version"] == "v1"


async def test_processes_and_user_namespaces_are_refused_and_programs_still_run(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    sandbox = sandbox_of(
        live.gateway, (await provision(live, app_repo.v1, limits={"processes": 12}))["task_id"]
    )
    forked = await ask(sandbox, "/fork?n=200&reap=1")
    assert forked["ok"] and forked["result"]["forked"] < 12, forked
    for how in ("unshare", "clone"):
        tried = await ask(sandbox, f"/userns?how={how}")
        assert not tried["ok"], (how, tried)
    spawned = await ask(sandbox, "/spawn")
    assert spawned["ok"] and spawned["result"]["thread"] == ["ran"], spawned


async def test_teardown_leaves_nothing_and_keeps_the_data_when_asked(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    task = await provision(live, app_repo.v1, keep_data=True)
    sandbox = sandbox_of(live.gateway, task["task_id"])
    assert (await ask(sandbox, "/write?path=/data/note"))["ok"]
    response = await live.http.delete(f"/v1/tasks/{task['task_id']}", headers=live.control)
    assert response.status_code == 200
    assert sandbox.name not in containers()
    assert not sandbox.socket_path.exists() and not sandbox.folder.exists()
    [ended] = await live.evidence(task["task_id"], "sandbox.torn_down")
    assert ended["data"]["processes_left"] == 0
    artifact = ended["data"]["data"]["artifact_id"]
    got = await live.http.get(f"/v1/artifacts/{artifact}", headers=live.control)
    assert got.status_code == 200 and len(got.content) > 0


async def test_what_a_killed_gateway_left_is_removed_at_start_and_a_live_task_kept(
    tmp_path: Path, app_repo: AppRepo, incus_socket: str
) -> None:
    settings = incus_settings(tmp_path / "data", app_repo, incus_socket)
    # The short task is made last, and the gateway killed at once: it expires after.
    (kept, kept_task, _), (gone, _gone_task, expiry) = await _left_by_a_killed_gateway(
        settings, app_repo, ttls=(600, 5)
    )
    await until(lambda: time.time() > expiry + 1, what="the short task to expire")
    # The next gateway on the same data: the expired task's container goes at start, the
    # live task's stays until that task is taken up again (or ends).
    async with live_gateway(settings) as live:
        assert gone not in containers()
        assert kept in containers()
        record = await live.gateway.tasks.get(kept_task)
        await live.gateway.services.get(Sandboxes).attach(record.identity)
        assert (await ask(sandbox_of(live.gateway, kept_task), "/version"))["version"] == "v1"
        live.created.append(kept_task)
    assert kept not in containers()


async def _left_by_a_killed_gateway(
    settings: Settings, app_repo: AppRepo, *, ttls: tuple[int, ...]
) -> list[tuple[str, str, float]]:
    """A gateway process that provisions a sandbox for a task of each TTL and is then
    killed (SIGKILL): (container, task, expiry) of each."""
    port = free_port()
    inherited = {n: os.environ[n] for n in ("PATH", "PYTHONPATH") if n in os.environ}
    env = {**inherited, **settings_env(settings), "GATEWAY_PORT": str(port)}
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, then only waited for
        [sys.executable, "-m", "gateway.cli", "serve", "--no-example"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    left = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await until_true(lambda: _answers(client), what="the gateway to start")
            for ttl in ttls:
                body = {**provision_body(app_repo.v1, provider="incus"), "ttl_s": ttl}
                response = await client.post(
                    "/v1/tasks",
                    json=body,
                    headers={"authorization": f"Bearer {settings.control_key}"},
                    timeout=PROVISION_TIMEOUT_S,
                )
                assert response.status_code == 201, response.text
                task_id = response.json()["task_id"]
                left.append((task_id, time.time() + ttl))
    finally:
        process.kill()
        process.wait()
    named = {_task_of_container(c): c for c in containers()}
    return [(named[task_id], task_id, expiry) for task_id, expiry in left]


async def _answers(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/healthz")).status_code == 200
    except httpx.HTTPError:
        return False


def _task_of_container(name: str) -> str:
    done = subprocess.run(
        ["incus", "config", "get", name, "user.gateway.task"],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment a `gateway serve` process reads these settings from."""
    env = {}
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        if isinstance(value, list):
            text = ",".join(map(str, value))
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, BaseModel):
            text = value.model_dump_json()
        elif isinstance(value, dict):
            text = json.dumps(
                {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in value.items()}
            )
        else:
            text = str(value)
        env[f"GATEWAY_{name.upper()}"] = text
    return env


# -- a remote Incus, over HTTPS with a client certificate ----------------------------------


def _certificate(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:secp384r1", "-sha384", "-nodes", "-days", "1",
            "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def incus_https(tmp_path: Path, incus_socket: str) -> Iterator[dict[str, str]]:
    """This machine's Incus also answering on a loopback HTTPS port, trusting one client
    certificate: what a gateway sees of a remote Incus."""
    port = free_port()
    cert, key = _certificate(tmp_path, f"gateway-{os.getpid()}")
    name = f"gateway-test-{os.getpid()}"
    subprocess.run(
        ["incus", "config", "set", "core.https_address", f"127.0.0.1:{port}"], check=True
    )
    subprocess.run(
        ["incus", "config", "trust", "add-certificate", str(cert), "--name", name], check=True
    )
    try:
        yield {
            "url": f"https://127.0.0.1:{port}",
            "client_cert": str(cert),
            "client_key": str(key),
            "server_cert": "/var/lib/incus/server.crt",
        }
    finally:
        fingerprint = (
            subprocess.run(
                ["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256"],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.split("=", 1)[1]
            .replace(":", "")
            .strip()
            .lower()
        )
        subprocess.run(["incus", "config", "trust", "remove", fingerprint], check=False)
        subprocess.run(["incus", "config", "unset", "core.https_address"], check=False)


async def test_a_remote_incus_is_reached_over_https_with_the_gateways_certificate(
    tmp_path: Path, app_repo: AppRepo, incus_https: dict[str, str]
) -> None:
    remote = {**incus_https, "socket_dir": f"/run/gateway-incus/{INCUS_DEPLOYMENT}-tls"}
    settings = sandbox_settings(
        tmp_path / "data", app_repo, sandbox_incus={**remote, "deployment": INCUS_DEPLOYMENT}
    )
    async with live_gateway(settings) as live:
        sandbox = sandbox_of(live.gateway, (await provision(live, app_repo.v2))["task_id"])
        assert (await ask(sandbox, "/version"))["version"] == "v2"
    # A certificate Incus does not trust reaches nothing: the create says why, at once.
    stranger, stranger_key = _certificate(tmp_path, "stranger")
    untrusted = {**remote, "client_cert": str(stranger), "client_key": str(stranger_key)}
    settings = sandbox_settings(
        tmp_path / "other", app_repo, sandbox_incus={**untrusted, "deployment": INCUS_DEPLOYMENT}
    )
    async with live_gateway(settings) as live:
        body = provision_body(app_repo.v1, provider="incus")
        refused = await live.http.post(
            "/v1/tasks", json=body, headers=live.control, timeout=PROVISION_TIMEOUT_S
        )
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "sandbox_unavailable" and "not authorized" in error["message"]


async def test_concurrent_creates_take_exactly_the_free_slots(
    tmp_path: Path, app_repo: AppRepo, incus_socket: str
) -> None:
    settings = incus_settings(tmp_path / "data", app_repo, incus_socket, sandbox_max_live=1)
    async with live_gateway(settings) as live:
        body = provision_body(app_repo.v1, provider="incus")
        answers = await asyncio.gather(
            *(
                live.http.post(
                    "/v1/tasks", json=body, headers=live.control, timeout=PROVISION_TIMEOUT_S
                )
                for _ in range(3)
            )
        )
        made = [a.json()["task_id"] for a in answers if a.status_code == 201]
        live.created.extend(made)
        assert sorted(a.status_code for a in answers) == [201, 503, 503], [a.text for a in answers]
        for answer in answers:
            if answer.status_code == 503:
                error = answer.json()["error"]
                assert (error["code"], error["retryable"]) == ("sandbox_unavailable", True)
                assert "slot" in error["message"]
        # The refused creates bound no container to a task: only the one sandbox has one.
        assert bound_tasks() == made


def bound_tasks() -> list[str]:
    done = subprocess.run(
        ["incus", "list", "--format", "json"], check=True, capture_output=True, text=True
    )
    configs = [i.get("config") or {} for i in json.loads(done.stdout)]
    return [
        c["user.gateway.task"]
        for c in configs
        if c.get("user.gateway.deployment") == INCUS_DEPLOYMENT and "user.gateway.task" in c
    ]


async def test_a_commit_shadowing_a_module_the_launcher_imports_runs_nothing_before_the_limits(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    # A `resource.py` at the checkout's root would be the launcher's `resource` (it runs in
    # /app) were the launcher not isolated from the working folder: it would run as the
    # app before any limit is set.
    (app_repo.path / "resource.py").write_text("raise SystemExit(7)\n")
    git(app_repo.path, "add", "resource.py")
    git(app_repo.path, "commit", "-q", "-m", "a module of the standard library's name")
    commit = git(app_repo.path, "rev-parse", "HEAD")
    try:
        task = await provision(live, commit, limits={"cpu_s": 30})
        sandbox = sandbox_of(live.gateway, task["task_id"])
        assert (await ask(sandbox, "/version"))["version"] == "v2"
        rlimits = sandbox.manifest["enforced"]["rlimits"]
        assert rlimits["cpu_s"] == 31 and rlimits["core_bytes"] == 0, rlimits
    finally:
        git(app_repo.path, "reset", "-q", "--hard", app_repo.v2)
