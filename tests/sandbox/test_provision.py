"""Provisioning a task's sandbox through `POST /v1/tasks`: the app at exactly the commit
asked for, its manifest in evidence and in `GET /v1/tasks/{id}`, and clear refusals that
leave nothing running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.sandbox.checkout import tree_digest
from gateway.sandbox.local import sandbox_processes
from gateway.testing import LiveGateway
from tests.sandbox.conftest import AppRepo, ask, handle, provision, provision_body


async def test_two_tasks_at_two_commits_serve_two_versions(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    first = await provision(live, app_repo.v1[:12])
    second = await provision(live, app_repo.v2)
    assert await ask(live, first["task_id"], "/version") == {
        "version": "v1",
        "commit": app_repo.v1,
    }
    assert await ask(live, second["task_id"], "/version") == {
        "version": "v2",
        "commit": app_repo.v2,
    }
    a, b = handle(live, first["task_id"]), handle(live, second["task_id"])
    assert a.origin != b.origin
    assert a.origin.endswith(".sandbox.internal")
    assert a.uid != b.uid


async def test_the_manifest_is_evidence_and_in_the_task(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    created = await provision(
        live, app_repo.v1, env={"GREETING": "hello"}, limits={"processes": 32}
    )
    task_id = created["task_id"]
    sandbox = handle(live, task_id)
    answer = await live.http.get(f"/v1/tasks/{task_id}", headers=live.control)
    body = answer.json()
    manifest = body["sandbox"]["manifest"]
    assert body["sandbox"]["app_origin"] == sandbox.origin
    assert body["sandbox"]["state"] == "healthy"
    assert manifest["kind"] == "sandbox-manifest/v1"
    assert manifest["provider"] == "local"
    assert manifest["repository"] == "probe"
    assert manifest["commit"] == app_repo.v1
    assert manifest["origin"] == sandbox.origin
    assert manifest["bound_to"]["task_id"] == task_id
    assert manifest["bound_to"]["org_id"] == "org_a"
    assert manifest["bound_to"]["owner"] == "user_1"
    assert manifest["limits"]["processes"] == 32
    assert manifest["limits"]["memory_mb"] == 1024  # the gateway's maximum, not asked for
    assert manifest["env"] == ["GREETING"]  # names, never values
    assert "hello" not in str(manifest)
    # The digest is of what the app runs, recomputed from the checkout on disk.
    assert manifest["tree"]["sha256"] == tree_digest(sandbox.checkout)
    assert manifest["tree"]["files"] == 2
    [recorded] = await live.evidence(task_id, "sandbox-manifest/v1")
    assert recorded["data"] == manifest


async def test_teardown_kills_every_process_and_keeps_the_data_when_asked(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    created = await provision(live, app_repo.v1, keep_data=True)
    task_id = created["task_id"]
    sandbox = handle(live, task_id)
    forked = await ask(live, task_id, "/fork?n=5")
    assert forked["result"]["forked"] == 5
    await ask(live, task_id, "/bigfile?mb=1")
    assert len(sandbox_processes(sandbox.uid, sandbox.pid_namespace)) >= 6
    await live.end_task(task_id)
    # Counted from /proc: by the sandbox's user and by its PID namespace.
    assert sandbox_processes(sandbox.uid, sandbox.pid_namespace) == []
    assert not sandbox.folder.exists()
    [torn] = await live.evidence(task_id, "sandbox.torn_down")
    assert torn["data"]["processes_left"] == 0
    artifact = torn["data"]["data"]
    kept = await live.http.get(f"/v1/artifacts/{artifact['artifact_id']}", headers=live.control)
    assert kept.status_code == 200
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(kept.content)) as tar:
        assert tar.getmember("data/big").size == 1024 * 1024
    # After its end the task still says what ran for it.
    body = (await live.http.get(f"/v1/tasks/{task_id}", headers=live.control)).json()
    assert body["sandbox"]["state"] == "torn_down"
    assert body["sandbox"]["manifest"]["sandbox_id"] == sandbox.sandbox_id


async def refused(live: LiveGateway, body: dict[str, Any]) -> dict[str, Any]:
    response = await live.http.post("/v1/tasks", json=body, headers=live.control)
    assert response.status_code in (422, 503), response.text
    error: dict[str, Any] = response.json()["error"]
    error["http"] = response.status_code
    return error


def nothing_left(live: LiveGateway) -> None:
    root: Path = live.gateway.settings.sandbox_root
    assert [p.name for p in root.iterdir()] == [] if root.exists() else True
    base = live.gateway.settings.sandbox_uid_base
    for slot in range(4):
        assert sandbox_processes(base + slot, None) == []


async def test_failed_provisioning_is_a_clear_refusal_and_leaves_nothing(
    live: LiveGateway, app_repo: AppRepo
) -> None:
    unknown = await refused(live, provision_body(app_repo.v1, repository="elsewhere"))
    assert (unknown["code"], unknown["http"]) == ("sandbox_refused", 422)
    assert unknown["details"]["field"] == "repository"

    commit = await refused(live, provision_body("0123456789abcdef"))
    assert (commit["code"], commit["http"]) == ("sandbox_unknown_commit", 422)

    env = await refused(live, provision_body(app_repo.v1, env={"PATH_TO_SECRET": "x"}))
    assert (env["code"], env["details"]["field"]) == ("sandbox_refused", "env")

    limits = await refused(live, provision_body(app_repo.v1, limits={"memory_mb": 1 << 19}))
    assert (limits["code"], limits["details"]["field"]) == ("sandbox_refused", "limits")

    exits = await refused(live, provision_body(app_repo.v1, repository="exits"))
    assert (exits["code"], exits["http"], exits["retryable"]) == ("sandbox_unhealthy", 503, True)
    assert exits["details"]["exit_code"] == 5

    silent = await refused(live, provision_body(app_repo.v1, repository="unhealthy"))
    assert silent["code"] == "sandbox_unhealthy"
    assert silent["details"]["last_status"] == 404

    both = provision_body(app_repo.v1)
    both["sandbox"]["app_origin"] = "http://127.0.0.1:9"
    origin = await refused(live, both)
    assert origin["code"] == "invalid_input"

    hostile = await refused(live, provision_body("HEAD"))
    assert hostile["code"] == "invalid_input"  # a commit is hex, never a ref or an option

    nothing_left(live)
    assert live.gateway.tasks.live_ids() == []
