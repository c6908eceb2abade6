from tests.conftest import Live


async def test_task_lifecycle_over_loopback(live: Live) -> None:
    task = await live.create_task()
    agent = {"authorization": f"Bearer {task['tokens']['agent']}"}
    got = await live.http.get(f"/v1/tasks/{task['task_id']}", headers=agent)
    assert got.status_code == 200
    assert got.json()["status"] == "active"
    await live.end_task(task["task_id"])
    again = await live.http.get(f"/v1/tasks/{task['task_id']}", headers=agent)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "revoked"
