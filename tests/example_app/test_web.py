"""The dashboard over real HTTP: its session cookie, forgery and cross-organization refusals,
text rendered as text, and the tab token handed over through the session only."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from examples.synthetic_app import SyntheticApp
from examples.synthetic_app.models import DraftFields, RunRequest
from examples.synthetic_app.store import who
from gateway.core.tokens import Purpose
from gateway.serving import serving
from tests.example_app.conftest import Stack

ADA = who("org_acme", "ada")


@pytest.fixture
async def site(dashboard: SyntheticApp) -> AsyncIterator[str]:
    async with serving(dashboard.asgi()) as url:
        yield url


@contextlib.asynccontextmanager
async def signed_in(url: str, user: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, headers={"origin": url}) as client:
        response = await client.post("/signin", data={"user_id": user})
        assert response.status_code == 303, response.text
        yield client


async def test_the_session_cookie_is_signed_httponly_and_samesite(site: str) -> None:
    async with httpx.AsyncClient(base_url=site, headers={"origin": site}) as client:
        response = await client.post("/signin", data={"user_id": "ada"})
        cookie = response.headers["set-cookie"]
        assert cookie.startswith("dashboard_session=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        page = await client.get("/agents")
        assert page.status_code == 200
        assert "Ada Admin" in page.text
        assert "Support triage" in page.text

        # A tampered cookie is no session at all.
        value = client.cookies["dashboard_session"]
        client.cookies.set("dashboard_session", value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
        again = await client.get("/agents")
        assert again.status_code == 303
        assert again.headers["location"] == "/signin"


async def test_pages_need_a_session_and_the_api_says_401(site: str) -> None:
    async with httpx.AsyncClient(base_url=site) as client:
        assert (await client.get("/agents")).headers["location"] == "/signin"
        api = await client.get("/api/runs/run_0123")
        assert api.status_code == 401
        assert api.json()["error"]["code"] == "invalid_token"


async def test_a_cross_origin_post_is_refused(site: str, dashboard: SyntheticApp) -> None:
    async with signed_in(site, "ada") as client:
        agent_id = (await dashboard.store.list_agents(ADA))[0]["id"]
        forged = await client.post(
            f"/agents/{agent_id}/draft",
            data={"name": "Pwned", "instructions": "x", "model": "sim-small"},
            headers={"origin": "http://evil.example"},
        )
        assert forged.status_code == 403
        assert (await dashboard.store.get_agent(ADA, agent_id))["draft"] is None
        # Signing someone in from another site is refused too (login forgery).
        assert (
            await client.post(
                "/signin", data={"user_id": "gus"}, headers={"origin": "http://evil.example"}
            )
        ).status_code == 403


async def test_data_is_rendered_as_text(site: str, dashboard: SyntheticApp) -> None:
    async with signed_in(site, "ada") as client:
        evil = '<img src=x onerror="alert(1)">'
        written = await dashboard.store.write_draft(
            ADA, None, DraftFields(name=evil, instructions="</textarea><script>alert(2)</script>")
        )
        page = await client.get(f"/agents/{written['agent_id']}")
        assert page.status_code == 200
        assert evil not in page.text
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page.text
        assert "<script>alert(2)" not in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]


async def test_another_organization_gets_404_everywhere(site: str, dashboard: SyntheticApp) -> None:
    agent_id = (await dashboard.store.list_agents(ADA))[0]["id"]
    suite_id = (await dashboard.store.list_suites(ADA))[0]["id"]
    run = await dashboard.start_run(ADA, RunRequest(agent_id=agent_id, suite_id=suite_id))
    async with signed_in(site, "gus") as client:
        for path in (
            f"/agents/{agent_id}",
            f"/suites/{suite_id}",
            f"/runs/{run['run_id']}",
            f"/reports/{run['run_id']}",
            f"/api/runs/{run['run_id']}",
        ):
            response = await client.get(path)
            assert response.status_code == 404, path
            assert "Support triage" not in response.text
        for path, data in (
            (f"/agents/{agent_id}/draft", {"name": "x", "model": "sim-small"}),
            (f"/agents/{agent_id}/save", {}),
            (f"/suites/{suite_id}/runs", {"agent_id": agent_id}),
        ):
            assert (await client.post(path, data=data)).status_code == 404, path
        listing = await client.get("/runs")
        assert run["run_id"] not in listing.text


async def test_a_member_cannot_save_a_version(site: str, dashboard: SyntheticApp) -> None:
    agent_id = (await dashboard.store.list_agents(ADA))[0]["id"]
    async with signed_in(site, "max") as client:
        builder = await client.get(f"/agents/{agent_id}")
        assert 'data-testid="save-version"' not in builder.text
        drafted = await client.post(
            f"/agents/{agent_id}/draft",
            data={"name": "Support triage", "instructions": "Greet.", "model": "sim-small"},
        )
        assert drafted.status_code == 303
        saved = await client.post(f"/agents/{agent_id}/save")
        assert saved.status_code == 403
    agent = await dashboard.store.get_agent(ADA, agent_id)
    assert agent["draft"]["instructions"] == "Greet."
    assert len(agent["versions"]) == 1


async def test_a_run_started_from_the_page_reaches_its_report(
    site: str, dashboard: SyntheticApp
) -> None:
    agent_id = (await dashboard.store.list_agents(ADA))[0]["id"]
    suite_id = (await dashboard.store.list_suites(ADA))[0]["id"]
    async with signed_in(site, "ada") as client:
        started = await client.post(
            f"/suites/{suite_id}/runs", data={"agent_id": agent_id, "max_tokens": "3000"}
        )
        assert started.status_code == 303
        run_id = started.headers["location"].rsplit("/", 1)[1]
        body: dict[str, Any] = {"terminal": False, "fingerprint": ""}
        for _ in range(50):
            body = (
                await client.get(
                    f"/api/runs/{run_id}", params={"wait": "2", "since": body["fingerprint"]}
                )
            ).json()
            if body["terminal"]:
                break
        assert body["state"] == "completed"
        report = await client.get(f"/reports/{run_id}")
        assert report.status_code == 200
        assert re.search(r'data-testid="report-state">completed<', report.text)
        assert "provider setup error(s)" in report.text


async def test_the_tab_token_comes_only_from_the_session_endpoint(stack: Stack) -> None:
    url = stack.dashboard_url
    async with httpx.AsyncClient(base_url=url) as anonymous:
        refused = await anonymous.post("/api/assistant/session", headers={"origin": url})
        assert refused.status_code == 401
    async with signed_in(url, "max") as client:
        forged = await client.post(
            "/api/assistant/session", headers={"origin": "http://evil.example"}
        )
        assert forged.status_code == 403
        answer = await client.post("/api/assistant/session")
        assert answer.status_code == 200
        assert answer.headers["cache-control"] == "no-store"
        grant = answer.json()
        assert set(grant) == {"task_id", "tab_token", "gateway", "expires_at"}
        # The token is a tab token of a task for exactly this user, and nothing more.
        gw = stack.live.gateway
        identity = await gw.tasks.authenticate(grant["tab_token"], Purpose.TAB)
        assert (identity.org_id, identity.actor.id, identity.actor.role) == (
            "org_acme",
            "max",
            "member",
        )
        assert identity.sandbox.app_origin == "http://127.0.0.1:9"
        with pytest.raises(Exception, match=r"purpose|token"):
            await gw.tasks.authenticate(grant["tab_token"], Purpose.AGENT)
        # The same tab of the same session gets the same task back; another browser tab of
        # the session gets its own (so neither supersedes the other); `renew` replaces one.
        assert (await client.post("/api/assistant/session")).json()["task_id"] == grant["task_id"]
        other = (await client.post("/api/assistant/session", json={"tab": "t2"})).json()
        assert other["task_id"] != grant["task_id"]
        renewed = (
            await client.post("/api/assistant/session", json={"tab": "t2", "renew": True})
        ).json()
        assert renewed["task_id"] != other["task_id"]
        assert gw.tasks.status_of(await gw.tasks.get(other["task_id"])) == "ended"
        bad = await client.post("/api/assistant/session", json={"tab": "../x"})
        assert bad.status_code == 422
        # Signing out ends every task of the session.
        await client.post("/signout")
        for task_id in (grant["task_id"], renewed["task_id"]):
            assert gw.tasks.status_of(await gw.tasks.get(task_id)) == "ended"
