"""The gateway is killed with SIGKILL in a burst of side-effect calls, then restarted, on
each store.

What was answered `succeeded` is in the store, no side effect runs twice under one
idempotency key (the bridge's request id), and every token of an ended task still fails.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import task_body
from tests.faults.process import CONTROL_KEY, GatewayProcess

CONTROL = {"authorization": f"Bearer {CONTROL_KEY}"}
BURST = 80


def request(request_id: str, index: int) -> dict[str, Any]:
    return {
        "schema": "wp-codebox/parent-tool-request/v1",
        "version": 1,
        "request_id": request_id,
        "tool": "workspace.write",
        "operation": "call",
        "input": {"path": f"out/{index}.txt", "contents": f"contents of {index}"},
        "sandbox_session": {"caller_session_id": "burst"},
        "authorization": {"allowed_tools": [], "principal": {}},
        "metadata": {},
    }


async def burst(base_url: str, token: str, kill: GatewayProcess) -> dict[str, dict[str, Any]]:
    """Send BURST requests at once; SIGKILL the gateway once a quarter are answered."""
    answered: dict[str, dict[str, Any]] = {}
    headers = {"authorization": f"Bearer {token}"}
    enough = asyncio.Event()

    async def one(client: httpx.AsyncClient, i: int) -> None:
        rid = f"ptr_burst_{i}"
        try:
            response = await client.post("/v1/parent-tools", json=request(rid, i), headers=headers)
        except httpx.HTTPError:
            return  # the gateway died under this request: it was never answered
        answered[rid] = response.json()
        if len(answered) >= BURST // 4:
            enough.set()

    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        tasks = [asyncio.create_task(one(client, i)) for i in range(BURST)]
        await asyncio.wait_for(enough.wait(), timeout=180)
        kill.kill()
        await asyncio.gather(*tasks)
    return answered


@pytest.mark.timeout(300)
async def test_sigkill_mid_burst_loses_nothing_answered(
    tmp_path: Path, database_url: str | None
) -> None:
    # On SQLite in the data dir, and on PostgreSQL (a fresh database of the test cluster).
    store = {"GATEWAY_DATABASE_URL": database_url} if database_url else {}
    gateway = GatewayProcess(tmp_path / "data", store)
    gateway.start()
    try:
        async with httpx.AsyncClient(
            base_url=gateway.base_url, headers=CONTROL, timeout=10
        ) as http:
            created = await http.post(
                "/v1/tasks", json=task_body(scopes=["workspace:read", "workspace:write"])
            )
            task = created.json()
            ended = (
                await http.post("/v1/tasks", json=task_body(scopes=["workspace:write"]))
            ).json()
            assert (await http.delete(f"/v1/tasks/{ended['task_id']}")).status_code == 200
        answered = await burst(gateway.base_url, task["tokens"]["bridge"], gateway)
    finally:
        gateway.stop()
    succeeded = {rid for rid, env in answered.items() if env["status"] == "succeeded"}
    assert len(succeeded) >= BURST // 4

    gateway.start()
    try:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
            # The ended task's tokens fail, for every purpose that has a door here.
            status = await client.get(
                f"/v1/tasks/{ended['task_id']}",
                headers={"authorization": f"Bearer {ended['tokens']['agent']}"},
            )
            assert (status.status_code, status.json()["error"]["code"]) == (401, "revoked")
            bridge = await client.post(
                "/v1/parent-tools",
                json=request("ptr_after", 0),
                headers={"authorization": f"Bearer {ended['tokens']['bridge']}"},
            )
            assert bridge.status_code == 401

            evidence = await client.get(
                f"/v1/tasks/{task['task_id']}/evidence", params={"limit": 5000}, headers=CONTROL
            )
            calls = [r for r in evidence.json()["records"] if r.get("kind") == "call"]
            stored = {r["idempotency_key"] for r in calls if r["status"] == "succeeded"}
            assert succeeded <= stored, "an answered call is missing from the store"

            # Every request again, same ids: the answered ones replay their recorded result.
            headers = {"authorization": f"Bearer {task['tokens']['bridge']}"}
            again = await asyncio.gather(
                *(
                    client.post(
                        "/v1/parent-tools", json=request(f"ptr_burst_{i}", i), headers=headers
                    )
                    for i in range(BURST)
                )
            )
            for i, response in enumerate(again):
                rid = f"ptr_burst_{i}"
                body = response.json()
                assert body["status"] == "succeeded", body
                if rid in succeeded:
                    assert body["output"] == answered[rid]["output"]

            evidence = await client.get(
                f"/v1/tasks/{task['task_id']}/evidence", params={"limit": 5000}, headers=CONTROL
            )
            runs = Counter(
                r["idempotency_key"]
                for r in evidence.json()["records"]
                if r.get("kind") == "call" and not r["replayed"] and r["status"] == "succeeded"
            )
            assert runs, "no call ran"
            assert max(runs.values()) == 1, "a side effect ran twice under one key"
            assert set(runs) == {f"ptr_burst_{i}" for i in range(BURST)}
    finally:
        gateway.stop()
