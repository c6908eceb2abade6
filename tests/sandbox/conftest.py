"""Fixtures of the sandbox tests: a throwaway git repository holding the probe app at two
commits, and a gateway whose settings register it (real bubblewrap, real processes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from gateway.sandbox.local import LocalProvider, LocalSandbox
from gateway.sandbox.service import Sandboxes
from gateway.settings import Settings
from gateway.testing import LiveGateway, live_gateway, test_settings
from tests.servers.incus import IncusUnavailable, incus_daemon, remove_deployment

PROBE_APP = Path(__file__).with_name("probe_app.py")


@dataclass(frozen=True)
class AppRepo:
    path: Path
    v1: str
    v2: str


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "HOME": str(repo),
        },
    )
    return done.stdout.strip()


@pytest.fixture(scope="session")
def app_repo(tmp_path_factory: pytest.TempPathFactory) -> AppRepo:
    repo = tmp_path_factory.mktemp("probe-repo")
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(PROBE_APP, repo / "app.py")
    (repo / "VERSION").write_text("v1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    v1 = git(repo, "rev-parse", "HEAD")
    (repo / "VERSION").write_text("v2\n")
    git(repo, "commit", "-q", "-am", "v2")
    v2 = git(repo, "rev-parse", "HEAD")
    return AppRepo(repo, v1, v2)


# The uids this test process's gateways run sandboxes as: a gateway kills any process of
# its uid range when it starts, so two test runs on one machine must not share one. Each
# process has 128: its gateways' 32 by default, and the blocks +32 and +64 some tests use.
UID_BASE = 1_900_000_000 + 128 * (os.getpid() % 100_000)


def sandbox_settings(
    data_dir: Path,
    repo: AppRepo,
    *,
    repositories: dict[str, Any] | None = None,
    **overrides: Any,
) -> Settings:
    command = ["{python}", "app.py"]
    overrides.setdefault("sandbox_uid_base", UID_BASE)
    return test_settings(
        data_dir,
        sandbox_repositories={
            "probe": {
                "path": str(repo.path),
                "command": command,
                "health_path": "/healthz",
                "env": ["GREETING"],
                "ready_timeout_s": 60,
            },
            # Exits at once: never healthy.
            "exits": {
                "path": str(repo.path),
                "command": ["{python}", "-c", "raise SystemExit(5)"],
                "ready_timeout_s": 60,
            },
            # Runs, but its health path is not there.
            "unhealthy": {
                "path": str(repo.path),
                "command": command,
                "health_path": "/nowhere",
                "ready_timeout_s": 2,
            },
            **(repositories or {}),
        },
        **overrides,
    )


@pytest_asyncio.fixture
async def live(tmp_path: Path, app_repo: AppRepo) -> AsyncIterator[LiveGateway]:
    async with live_gateway(sandbox_settings(tmp_path / "data", app_repo)) as gateway:
        yield gateway


def provision_body(commit: str, *, repository: str = "probe", **provision: Any) -> dict[str, Any]:
    return {
        "actor": {"id": "user_1", "role": "admin"},
        "org_id": "org_a",
        "sandbox": {
            "id": "sb_probe",
            "provision": {"repository": repository, "commit": commit, **provision},
        },
        "scopes": ["browser"],
    }


async def provision(live: LiveGateway, commit: str, **provision: Any) -> dict[str, Any]:
    response = await live.http.post(
        "/v1/tasks", json=provision_body(commit, **provision), headers=live.control
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    live.created.append(body["task_id"])
    return body


def local_provider(live: LiveGateway) -> LocalProvider:
    found = live.gateway.services.get(Sandboxes).providers.get("local")
    assert isinstance(found, LocalProvider)
    return found


def handle(live: LiveGateway, task_id: str) -> LocalSandbox:
    found = live.gateway.services.get(Sandboxes).handle_of(task_id)
    assert isinstance(found, LocalSandbox)
    return found


async def ask(live: LiveGateway, task_id: str, path: str, wait_s: float = 30.0) -> Any:
    """What the app in the task's sandbox answers `path` with (through its socket)."""
    sandbox = handle(live, task_id)
    transport = httpx.AsyncHTTPTransport(uds=str(sandbox.socket_path))
    async with httpx.AsyncClient(transport=transport, timeout=wait_s) as client:
        response = await client.get(f"{sandbox.origin}{path}")
    assert response.status_code == 200, response.text
    return json.loads(response.text)


# -- the `incus` provider ---------------------------------------------------------------

REQUIRE_INCUS = os.environ.get("GATEWAY_TEST_REQUIRE_INCUS") == "1"
# This test process's containers: apart from another run's on the same Incus.
INCUS_DEPLOYMENT = f"test-{os.getpid()}"


@pytest.fixture(scope="session")
def incus_socket() -> Iterator[str]:
    try:
        with incus_daemon() as socket_path:
            yield socket_path
            remove_deployment(INCUS_DEPLOYMENT)
    except IncusUnavailable as exc:
        if REQUIRE_INCUS:
            raise
        pytest.skip(f"no Incus here: {exc}")


def incus_settings(data_dir: Path, repo: AppRepo, socket_path: str, **overrides: Any) -> Settings:
    return sandbox_settings(
        data_dir,
        repo,
        sandbox_incus={"socket": socket_path, "deployment": INCUS_DEPLOYMENT},
        **overrides,
    )
