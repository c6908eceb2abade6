"""Signed-in tasks: the control plane gives a task cookies and local storage for its own
origins; the task's browser is signed in, and the credentials appear nowhere the task's
results, evidence, JSON, console or trace reach. A state for any other origin, or a
cookie for a parent domain, is refused before the task exists."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, urlsplit

import httpx
import pytest

from gateway.app import build_app
from gateway.browser import BrowserProcesses, install
from gateway.core.storage_state import StorageStates
from gateway.http import tasks as task_routes
from gateway.runtime import Gateway
from gateway.serving import serving
from tests.browser.conftest import Sites, browser_gateway, browser_settings
from tests.browser.site import LOCAL_TOKEN, SESSION_COOKIE
from tests.conftest import task_body

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def _state(origin: str, *, domain: str | None = None) -> dict[str, Any]:
    host = urlsplit(origin).hostname
    return {
        "cookies": [{"name": "session", "value": SESSION_COOKIE, "domain": domain or host}],
        "origins": [{"origin": origin, "localStorage": [{"name": "token", "value": LOCAL_TOKEN}]}],
    }


def _holds_a_secret(data: bytes | str) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [
        form
        for value in (SESSION_COOKIE, LOCAL_TOKEN)
        for form in (value, json.dumps(value), quote_plus(value))
        if form.encode() in raw
    ]


def _everything(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return b"\n".join(archive.read(name) for name in archive.namelist())


async def test_a_signed_in_task_reaches_the_page_behind_its_cookie_and_shows_no_credential(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(
        tmp_path, sites, task_chromium, browser_trace=True, browser_warm_contexts=1
    ) as b:
        signed_out = await b.task(org="org_out")
        page = (await b.call(signed_out, "browser.navigate", url="/account")).output
        assert "Sign in required" in page["snapshot"]

        # The warm stock has a context ready; a signed-in task's is made with its state.
        assert await b.pool.stocked() == 1
        task = await b.task(storage_state=_state(sites.allowed))
        heard: list[dict[str, Any]] = []

        async def listener(_level: str, _logger: str, data: dict[str, Any]) -> None:
            heard.append(data)

        b.gw.task_log.subscribe(task.task_id, "test", listener)
        nav = await b.call(task, "browser.navigate", url="/account")
        assert nav.ok, nav.error
        snapshot = nav.output["snapshot"]
        assert "Account of Ada" in snapshot and "token present [secret]" in snapshot
        assert "Session [secret]" in snapshot
        console = await b.call(task, "browser.console")
        assert "restored [secret] with session=[secret]" in json.dumps(console.output)
        assert (await b.call(task, "browser.screenshot")).ok

        assert any("session=[secret]" in json.dumps(d) for d in heard), heard
        assert _holds_a_secret(json.dumps(heard)) == []  # the task's log, as it is sent
        results = json.dumps([r.model_dump(mode="json") for r in (nav, console)])
        assert _holds_a_secret(results) == []
        described = json.dumps(b.gw.tasks.describe(await b.gw.tasks.get(task.task_id)))
        assert "storage_state" not in described and _holds_a_secret(described) == []
        await b.gw.events.flush(task.task_id)
        evidence = await b.gw.store.evidence_for(task.org_id, task.task_id)
        assert evidence and _holds_a_secret(json.dumps(evidence)) == []

        states = b.gw.tasks.storage_states
        assert isinstance(states, StorageStates) and states.holds(task.task_id)
        await b.gw.tasks.end(task.task_id)
        assert not states.holds(task.task_id)  # it ends with the task
        closed = (await b.evidence(task, "browser_closed"))[0]
        ref = await b.gw.store.get_artifact(closed["data"]["trace"]["artifact_id"])
        trace = _everything(await b.gw.store.read_artifact(ref))
        assert b"/account" in trace  # a trace of the signed-in page, with its requests
        assert _holds_a_secret(trace) == []


async def test_a_storage_state_outside_the_tasks_origins_is_refused_and_nothing_is_made(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    settings = browser_settings(tmp_path)
    gw = Gateway(settings)
    gw.services.provide(BrowserProcesses, task_chromium)
    app = build_app(gateway=gw, extensions=[task_routes.routes, install])
    app_origin = "http://app.corp.example"
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        control = {"authorization": f"Bearer {settings.control_key}"}

        async def create(state: Any, **kwargs: Any) -> httpx.Response:
            body = task_body(app_origin=app_origin, scopes=["browser"], **kwargs)
            return await http.post(
                "/v1/tasks", json={**body, "storage_state": state}, headers=control
            )

        local_foreign = _state(app_origin)
        local_foreign["origins"][0]["origin"] = sites.foreign
        attacks = {
            "a foreign origin's local storage": local_foreign,
            "a foreign host's cookie": _state(app_origin, domain=urlsplit(sites.foreign).hostname),
            "a parent domain's cookie": _state(app_origin, domain="corp.example"),
            "a leading-dot domain": _state(app_origin, domain=".app.corp.example"),
            "a sibling host's cookie": _state(app_origin, domain="billing.corp.example"),
            "a secure cookie for an http origin": {
                "cookies": [
                    {
                        "name": "s",
                        "value": SESSION_COOKIE,
                        "domain": "app.corp.example",
                        "secure": True,
                    }
                ]
            },
            "too large": _state(app_origin)
            | {
                "cookies": [
                    {"name": f"c{i}", "value": "v" * 3000, "domain": "app.corp.example"}
                    for i in range(25)
                ]
            },
            "a cookie value with a ';'": {
                "cookies": [
                    {"name": "s", "value": "a; Domain=corp.example", "domain": "app.corp.example"}
                ]
            },
            "an unknown field": {"cookies": [], "sessionStorage": []},
        }
        for why, state in attacks.items():
            answer = await create(state)
            assert answer.status_code == 422, (why, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "invalid_input", why
            assert "storage_state" in json.dumps(error), (why, error)
            assert _holds_a_secret(answer.text) == [], why
        assert gw.tasks.live_ids() == []
        assert await gw.store.live_tasks(0) == []

        # Its own origins, the allowed one besides the app's, are accepted.
        allowed = _state(app_origin)
        allowed["origins"].append({"origin": "http://docs.corp.example", "localStorage": []})
        made = await create(allowed, allowed_origins=["http://docs.corp.example"])
        assert made.status_code == 201, made.text
        task_id = made.json()["task_id"]
        shown = (await http.get(f"/v1/tasks/{task_id}", headers=control)).text
        assert _holds_a_secret(shown) == [] and "storage_state" not in shown
        await http.delete(f"/v1/tasks/{task_id}", headers=control)
