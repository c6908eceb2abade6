"""A busy dashboard tab sheds load, from the caller's side, over a real websocket.

The tab here is a Python client on a real websocket that answers when the test says so, or
after really taking its time; the gateway admits one UI action at a time to it. Who is sent,
who waits and who is turned away is decided by counts and by the tab's measured round trips,
never by how fast the machine is. What is checked: an action that cannot be answered in time
ends at once `unavailable`/`overloaded` with a retry hint, counted, and is never sent to the
tab; every admitted action is answered; every call has its one result and evidence record.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.core.identity import TaskIdentity
from gateway.core.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.core.tokens import Purpose
from gateway.tabs import ShowRunProgress, TabConfig, TabOutcome
from gateway.testing.waiting import until
from tests.tabs.conftest import DASHBOARD, RawTab, TabGateway, _start

Factory = Callable[..., Any]
ONE_AT_A_TIME = TabConfig(hello_timeout_s=1.0, actions_at_once=1, actions_waiting=1)


@pytest.fixture
async def busy_gateway(tmp_path: Path) -> AsyncIterator[TabGateway]:
    async with _start(tmp_path, [DASHBOARD], ONE_AT_A_TIME) as running:
        yield running


async def answer(tab: RawTab, task_id: str, request: dict[str, Any]) -> None:
    await tab.send(
        {
            "type": "reply",
            "id": request["id"],
            "task_id": task_id,
            "tab_id": "tab_1",
            "revision": request["revision"],
            "ok": True,
            "result": {"shown": request["action"]["run_id"]},
        }
    )


async def ui_task(gateway: TabGateway) -> tuple[dict[str, Any], str, TaskIdentity]:
    """A task that may use the UI tools: its answer, its id, and its stored identity."""
    task = await gateway.create_task(scopes=["ui"])
    identity = await gateway.gw.tasks.authenticate(task["tokens"]["tab"], Purpose.TAB)
    return task, task["task_id"], identity


async def test_a_busy_tab_refuses_at_once_what_it_cannot_take_and_answers_the_rest(
    busy_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    gateway = busy_gateway
    task, task_id, identity = await ui_task(gateway)

    def call(run_id: str) -> asyncio.Task[ToolResult]:
        return asyncio.create_task(
            gateway.gw.pipeline.call(
                identity, "ui.show_run_progress", {"run_id": run_id}, door=Door.MCP
            )
        )

    async with raw_tab_factory(gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        first = call("run_1")
        held = await tab.recv()  # the tab is busy with it, and does not answer yet
        second = call("run_2")
        await until(lambda: gateway.hub.describe(task_id)["waiting_requests"] == 1, "one waits")
        probe = (await gateway.http.get(f"/v1/tasks/{task_id}", headers=gateway.control)).json()
        assert probe["tab"]["pending_requests"] == 1 and probe["tab"]["waiting_requests"] == 1

        # The one place is taken and the one queue spot too: the third call ends at once,
        # while the tab still holds the first.
        refused = await call("run_3")
        assert not first.done() and not second.done()
        assert refused.status is ToolStatus.UNAVAILABLE
        assert refused.error is not None
        assert (refused.error.code, refused.error.retryable) == (ErrorCode.OVERLOADED, True)
        assert refused.error.details is not None and refused.error.details["retry_after_s"] >= 1
        assert "the dashboard tab is overloaded" in refused.error.message

        # The tab answers: the waiting call is sent next, and answered too.
        await answer(tab, task_id, held)
        assert (await first).status is ToolStatus.SUCCEEDED
        after = await tab.recv()
        assert after["action"]["run_id"] == "run_2"
        await answer(tab, task_id, after)
        assert (await second).status is ToolStatus.SUCCEEDED
        # Frames reach the tab in order: the next one it gets is a new call's, so the
        # refused call was never sent.
        fourth = call("run_4")
        request = await tab.recv()
        assert request["action"]["run_id"] == "run_4"
        await answer(tab, task_id, request)
        assert (await fourth).status is ToolStatus.SUCCEEDED

    assert await gateway.metric("gateway_calls_shed_total", resource="tab") == 1
    assert (
        await gateway.metric(
            "gateway_tab_requests_total", action="show_run_progress", status="unavailable"
        )
        == 1
    )
    # Nothing is lost: one evidence record per call, the refused one saying it was shed.
    records = await gateway.evidence(task_id, "call", wait_for=4)
    by_run = {r["input"]["run_id"]: r for r in records}
    assert sorted(by_run) == ["run_1", "run_2", "run_3", "run_4"]
    assert [by_run[r]["status"] for r in sorted(by_run)] == [
        "succeeded",
        "succeeded",
        "unavailable",
        "succeeded",
    ]
    assert by_run["run_3"]["context"]["admission"] == {"shed": True}
    assert by_run["run_2"]["context"]["admission"]["waited_ms"] > 0


async def test_a_slow_tab_turns_away_an_action_whose_deadline_it_could_not_meet(
    busy_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    gateway = busy_gateway
    task, task_id, identity = await ui_task(gateway)
    hub = gateway.hub

    def send(run_id: str, deadline_s: float) -> asyncio.Task[TabOutcome]:
        return asyncio.create_task(
            hub.send(identity, ShowRunProgress(run_id=run_id), timeout_s=deadline_s)
        )

    async with raw_tab_factory(gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        # The tab really takes its time with its first action: a second.
        slow = send("run_slow", 30)
        request = await tab.recv()
        await asyncio.sleep(1.0)
        await answer(tab, task_id, request)
        assert (await slow).ok
        # Now it holds the next one; a call behind it can expect to wait about a second
        # and to take about a second more.
        held = send("run_held", 30)
        request = await tab.recv()
        # With a second and a half left, that does not fit: refused at once, although the
        # queue has room, and the tab is sent nothing.
        hurried = await send("run_hurried", 1.5)
        assert hurried.status is ToolStatus.UNAVAILABLE
        assert hurried.error is not None and hurried.error.code == ErrorCode.OVERLOADED
        assert hurried.error.details is not None and hurried.error.details["retry_after_s"] >= 1
        assert not held.done()
        # With time to spare, a call waits its turn and is answered once the tab is free.
        patient = send("run_patient", 30)
        await until(lambda: hub.describe(task_id)["waiting_requests"] == 1, "the call waits")
        await answer(tab, task_id, request)
        assert (await held).ok
        request = await tab.recv()
        assert request["action"]["run_id"] == "run_patient"
        await answer(tab, task_id, request)
        outcome = await patient
        assert outcome.ok and outcome.waited_s > 0

        # A waiting call whose deadline draws near while the tab stays busy leaves the
        # queue, overloaded, rather than timing out once it was sent.
        held = send("run_held_again", 30)
        request = await tab.recv()
        # Time for its turn and its round trip by the tab's running average, at first.
        average_s = hub._admissions[task_id].average_s
        leaving = send("run_leaving", 2 * average_s + 0.5)
        await until(lambda: hub.describe(task_id)["waiting_requests"] == 1, "the call waits")
        outcome = await leaving
        assert outcome.error is not None and outcome.error.code == ErrorCode.OVERLOADED
        assert hub.describe(task_id)["waiting_requests"] == 0 and not held.done()
        await answer(tab, task_id, request)
        assert (await held).ok

    assert await gateway.metric("gateway_calls_shed_total", resource="tab") == 2


async def test_a_tab_that_leaves_fails_the_waiting_calls_as_unavailable(
    busy_gateway: TabGateway, raw_tab_factory: Factory
) -> None:
    gateway = busy_gateway
    task, task_id, identity = await ui_task(gateway)
    hub = gateway.hub
    async with raw_tab_factory(gateway.ws_url) as tab:
        await tab.hello(task["tokens"]["tab"])
        held = asyncio.create_task(hub.send(identity, ShowRunProgress(run_id="run_1")))
        await tab.recv()
        waiting = asyncio.create_task(hub.send(identity, ShowRunProgress(run_id="run_2")))
        await until(lambda: hub.describe(task_id)["waiting_requests"] == 1, "one waits")
    # The tab went away: the action it held and the one waiting for it both end, retryable.
    for outcome in await asyncio.gather(held, waiting):
        assert outcome.status is ToolStatus.UNAVAILABLE
        assert outcome.error is not None
        assert (outcome.error.code, outcome.error.retryable) == (ErrorCode.TAB_UNAVAILABLE, True)
    await until(lambda: task_id not in hub._admissions, "the tab's admission is let go")
