"""The console over a real loopback server, from the attacker's side first: no key, a wrong
key, each of a task's tokens, a forged or stale session, another organization's member;
then what the control plane's party sees and answers there, on both stores."""

from __future__ import annotations

import asyncio
import io
import re
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from starlette.requests import Request

from gateway.console import HostSignIn, Viewer, host_viewer
from gateway.console.access import COOKIE, ConsoleAccess
from gateway.console.sign_in import SIGN_IN_BODY_MAX
from gateway.core.approvals.broker import Decision
from gateway.core.registry import Tool, ToolContext
from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.conftest import Live, LiveFactory

POLICY = {"grantable": [{"tool": "notes.write", "by": "control"}]}
# One PNG pixel, as a screenshot artifact would hold.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
PEOPLE = {
    "b-member": host_viewer("bea", "member", {"org_b"}),
    "a-member": host_viewer("al", "member", {"org_a"}),
    # The task's own user (test tasks are user_1's), signed in through the host.
    "a-actor": host_viewer("user_1", "member", {"org_a"}),
}


class Note(BaseModel):
    text: str


async def people(request: Request) -> Viewer | None:
    return PEOPLE.get(request.cookies.get("host", ""))


def setup(gw: Gateway) -> None:
    async def write(_ctx: ToolContext, args: Note) -> dict[str, str]:
        return {"wrote": args.text}

    gw.registry.add(
        Tool("notes.write", "Write a note", "Writes", Note, write, scopes=frozenset({"notes:w"}))
    )
    gw.services.provide(HostSignIn, HostSignIn(people))


@pytest.fixture
def settings(store_settings: Settings) -> Settings:
    return store_settings


@pytest.fixture
async def live(live_factory: LiveFactory, settings: Settings) -> AsyncIterator[Live]:
    async with live_factory(settings, setup=setup) as running:
        yield running


async def sign_in(live: Live, client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/console/sign-in", data={"key": live.gateway.settings.control_key or ""}
    )
    assert answer.status_code == 303
    assert COOKIE in client.cookies


async def waiting(live: Live, **task: Any) -> tuple[dict[str, Any], asyncio.Future[Any], str]:
    """A task whose call of notes.write waits for the control plane."""
    body = await live.create_task(scopes=["ui"], approvals=POLICY, **task)
    ident = await live.gateway.tasks.authenticate(body["tokens"]["agent"], Purpose.AGENT)
    call = asyncio.ensure_future(
        live.gateway.pipeline.call(ident, "notes.write", {"text": "hi"}, door=Door.BRIDGE)
    )
    for _ in range(200):
        pending = live.gateway.approvals.pending(body["task_id"])
        if pending:
            return body, call, pending[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("the call did not ask")


def csrf_of(page: str) -> str:
    found = re.search(r'name="console-csrf" content="([0-9a-f]+)"', page)
    assert found, page[:500]
    return found.group(1)


async def test_nobody_gets_in_without_the_key_or_the_hosts_sign_in(live: Live) -> None:
    task = await live.create_task()
    tid = task["task_id"]
    pages = ["/console", f"/console/tasks/{tid}"]
    apis = [
        "/console/api/tasks",
        f"/console/api/tasks/{tid}/live",
        f"/console/tasks/{tid}/export.zip",
        "/console/trace-viewer/index.html",
    ]
    for url in pages:
        answer = await live.http.get(url)
        assert answer.status_code == 303, url
        assert answer.headers["location"] == "/console/sign-in"
    for url in apis:
        answer = await live.http.get(url)
        assert answer.status_code == 401, url
        assert answer.json()["error"]["code"] == "invalid_token"
    # Every token of the task, as a bearer credential and as the session cookie.
    for purpose, token in task["tokens"].items():
        for url in apis:
            answer = await live.http.get(url, headers={"authorization": f"Bearer {token}"})
            assert answer.status_code == 401, (purpose, url)
            answer = await live.http.get(url, headers={"cookie": f"{COOKIE}={token}"})
            assert answer.status_code == 401, (purpose, url)
    # A wrong key at the sign-in page makes no session.
    wrong = await live.http.post("/console/sign-in", data={"key": "x" * 40})
    assert wrong.status_code == 401
    assert COOKIE not in wrong.cookies
    stuffed = await live.http.post("/console/sign-in", content="&".join(["a=b"] * 20))
    assert stuffed.status_code == 422
    # A form larger than the sign-in page sends is refused unread, by its declared length
    # or as it streams in, and makes no session.
    oversized = "key=" + "k" * SIGN_IN_BODY_MAX
    declared = await live.http.post("/console/sign-in", content=oversized)
    assert (declared.status_code, declared.json()["error"]["code"]) == (413, "payload_too_large")

    async def streamed() -> AsyncIterator[bytes]:
        yield oversized.encode()

    chunked = await live.http.post("/console/sign-in", content=streamed())
    assert chunked.status_code == 413 and COOKIE not in chunked.cookies
    # The control key itself works as a bearer credential (scripts).
    answer = await live.http.get("/console/api/tasks", headers=live.control)
    assert answer.status_code == 200
    assert [t["task_id"] for t in answer.json()["tasks"]] == [tid]


def test_a_session_is_bound_to_the_keys_it_was_made_with() -> None:
    control = ["k" * 40]
    secrets = [["s" * 40]]
    access = ConsoleAccess(
        control_key=lambda: control[0], secret_keys=lambda: secrets[0], host=lambda: None
    )
    session = access.new_session()
    assert access._session_viewer(session) is not None
    # A new control key signs everyone out.
    control[0] = "m" * 40
    assert access._session_viewer(session) is None
    control[0] = "k" * 40
    # Signed under another secret key: not a session of this gateway.
    secrets[0] = ["t" * 40]
    assert access._session_viewer(session) is None
    # A rotated key list (newest first) still reads sessions signed under the older key.
    secrets[0] = ["t" * 40, "s" * 40]
    assert access._session_viewer(session) is not None


async def test_an_approval_is_answered_once_from_the_console(live: Live) -> None:
    task, call, approval_id = await waiting(live)
    tid = task["task_id"]
    async with httpx.AsyncClient(base_url=live.base_url) as client:
        await sign_in(live, client)
        page = await client.get(f"/console/tasks/{tid}")
        assert page.status_code == 200
        assert f'data-approval-id="{approval_id}"' in page.text
        assert "Approve notes.write" in page.text
        url = f"/console/api/tasks/{tid}/approvals/{approval_id}"
        # Without the page's token (a form on another site): refused, nothing decided.
        forged = await client.post(url, json={"decision": "approve"})
        assert forged.status_code == 403
        assert live.gateway.approvals.pending(tid)
        token = {"x-console-csrf": csrf_of(page.text)}
        bad = await client.post(url, json={"decision": "maybe"}, headers=token)
        assert bad.status_code == 422
        answer = await client.post(url, json={"decision": "approve"}, headers=token)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "approved"
        assert answer.json()["decision"]["channel"] == "control"
        assert answer.json()["decision"]["approver"] == {"id": "control-plane", "role": "control"}
        assert (await call).output == {"wrote": "hi"}
        again = await client.post(url, json={"decision": "deny"}, headers=token)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "conflict"
        live_view = (await client.get(f"/console/api/tasks/{tid}/live?after=0")).json()
        assert live_view["metrics"]["calls"] == 1
        assert live_view["metrics"]["pending_approvals"] == 0
        assert [a["status"] for a in live_view["approvals"]] == ["approved"]
        assert "through control" in live_view["entries_html"]


async def test_a_member_of_another_organization_finds_nothing(live: Live) -> None:
    theirs, call, approval_id = await waiting(live, org="org_a")
    mine = await live.create_task(org="org_b")
    tid = theirs["task_id"]
    ident = await live.gateway.tasks.authenticate(theirs["tokens"]["agent"], Purpose.AGENT)
    art = await live.gateway.store.put_artifact(
        ident, PIXEL, name="screenshot.png", media_type="image/png"
    )
    async with httpx.AsyncClient(base_url=live.base_url, cookies={"host": "b-member"}) as bea:
        listed = (await bea.get("/console/api/tasks")).json()["tasks"]
        assert [t["task_id"] for t in listed] == [mine["task_id"]]
        # Asking for the other organization by name narrows nothing open.
        listed = (await bea.get("/console/api/tasks?org=org_a")).json()["tasks"]
        assert listed == []
        for url in (
            f"/console/tasks/{tid}",
            f"/console/api/tasks/{tid}/live",
            f"/console/tasks/{tid}/export.zip",
            f"/console/tasks/{tid}/artifacts/{art.id}",
            f"/console/tasks/{tid}/traces/{art.id}/trace.zip",
        ):
            assert (await bea.get(url)).status_code == 404, url
        page = await bea.get(f"/console/tasks/{mine['task_id']}")
        token = {"x-console-csrf": csrf_of(page.text)}
        answer = await bea.post(
            f"/console/api/tasks/{tid}/approvals/{approval_id}",
            json={"decision": "approve"},
            headers=token,
        )
        assert answer.status_code == 404
        # Nor through their own task's URL.
        answer = await bea.post(
            f"/console/api/tasks/{mine['task_id']}/approvals/{approval_id}",
            json={"decision": "approve"},
            headers=token,
        )
        assert answer.status_code == 404
        assert live.gateway.approvals.pending(tid)
        # An artifact of another task, under this task's URL: not found either.
        assert (
            await bea.get(f"/console/tasks/{mine['task_id']}/artifacts/{art.id}")
        ).status_code == 404
    async with httpx.AsyncClient(base_url=live.base_url, cookies={"host": "a-member"}) as al:
        page = await al.get(f"/console/tasks/{tid}")
        assert page.status_code == 200
        picture = await al.get(f"/console/tasks/{tid}/artifacts/{art.id}")
        assert picture.content == PIXEL
        assert picture.headers["content-type"] == "image/png"
        assert "sandbox" in picture.headers["content-security-policy"]
        # The host's member answers as themself.
        answer = await al.post(
            f"/console/api/tasks/{tid}/approvals/{approval_id}",
            json={"decision": "deny"},
            headers={"x-console-csrf": csrf_of(page.text)},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["decision"]["approver"] == {"id": "al", "role": "member"}
    result = await call
    assert result.status == "denied"


async def test_the_list_filters_and_counts(live: Live) -> None:
    a = await live.create_task(org="org_a", actor="ann")
    b = await live.create_task(org="org_b", actor="bob", scopes=["ui"])
    ended = await live.create_task(org="org_a", actor="ann")
    ident = await live.gateway.tasks.authenticate(b["tokens"]["agent"], Purpose.AGENT)
    refused = await live.gateway.pipeline.call(
        ident, "browser.navigate", {"url": "http://127.0.0.1:9/"}, door=Door.MCP
    )
    assert refused.status == "denied"
    await live.end_task(ended["task_id"])

    async def ids(query: str) -> list[str]:
        answer = await live.http.get(f"/console/api/tasks?{query}", headers=live.control)
        assert answer.status_code == 200, answer.text
        return [t["task_id"] for t in answer.json()["tasks"]]

    assert set(await ids("")) == {a["task_id"], b["task_id"], ended["task_id"]}
    assert set(await ids("org=org_a")) == {a["task_id"], ended["task_id"]}
    assert await ids("actor=bob") == [b["task_id"]]
    assert await ids("status=ended") == [ended["task_id"]]
    assert set(await ids("status=active")) == {a["task_id"], b["task_id"]}
    assert await ids("door=mcp") == [b["task_id"]]
    assert await ids("door=bridge") == []
    listed = (await live.http.get("/console/api/tasks?actor=bob", headers=live.control)).json()
    assert listed["tasks"][0]["tally"] == {"calls": 1, "refused": 1, "pending_approvals": 0}
    assert listed["tasks"][0]["doors"] == ["mcp"]
    bad = await live.http.get("/console/api/tasks?status=sleeping", headers=live.control)
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_input"


async def test_the_export_is_one_archive_of_the_task(live: Live) -> None:
    task = await live.create_task()
    ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    art = await live.gateway.store.put_artifact(
        ident, PIXEL, name="screenshot.png", media_type="image/png"
    )
    await live.gateway.events.record(ident, "sandbox-manifest/v1", {"commit": "c" * 40})
    answer = await live.http.get(
        f"/console/tasks/{task['task_id']}/export.zip", headers=live.control
    )
    assert answer.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(answer.content))
    assert archive.read(f"screenshots/{art.id}.png") == PIXEL
    assert b"c" * 40 in archive.read("manifest.json")
    assert {"task.json", "timeline.json", "timeline.html", "evidence.json", "metrics.json"} <= set(
        archive.namelist()
    )
    assert control_key_absent(archive, live.gateway.settings.control_key or "")


def control_key_absent(archive: zipfile.ZipFile, key: str) -> bool:
    return all(key.encode() not in archive.read(name) for name in archive.namelist())


async def test_the_trace_viewer_is_served_from_the_gateway_behind_the_console(live: Live) -> None:
    index = await live.http.get("/console/trace-viewer/index.html", headers=live.control)
    assert index.status_code == 200
    assert "Trace Viewer" in index.text
    assert "connect-src 'self'" in index.headers["content-security-policy"]
    worker = await live.http.get("/console/trace-viewer/sw.bundle.js", headers=live.control)
    assert worker.status_code == 200
    assert worker.headers["content-type"].startswith("text/javascript")
    assert worker.headers["content-security-policy"] == "default-src 'self'; connect-src 'self'"
    for escape in ("../../../../../../etc/passwd", "..%2f..%2f..%2fpackage.json", "nope.js"):
        answer = await live.http.get(f"/console/trace-viewer/{escape}", headers=live.control)
        assert answer.status_code == 404, escape


async def test_only_a_trace_the_gateway_recorded_opens_as_a_trace(live: Live) -> None:
    # A zip the task's browser kept (a download) is the app's, or a hostile site's: the
    # viewer, on the console's origin, opens only the traces of the task's contexts.
    task = await live.create_task()
    ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    downloaded = await live.gateway.store.put_artifact(
        ident, b"PK\x05\x06" + b"\x00" * 18, name="site.zip", media_type="application/zip"
    )
    url = f"/console/tasks/{task['task_id']}/traces/{downloaded.id}/trace.zip"
    assert (await live.http.get(url, headers=live.control)).status_code == 404
    # The same bytes, recorded as the trace of the task's browser context, do open.
    await live.gateway.events.record(
        ident, "browser_closed", {"trace": {"artifact_id": downloaded.id}}
    )
    assert (await live.http.get(url, headers=live.control)).status_code == 200


async def test_the_tasks_own_user_does_not_answer_as_the_control_plane(live: Live) -> None:
    # The console answers as the control plane: the task's own user would settle there
    # what the policy keeps from them.
    task, call, approval_id = await waiting(live, org="org_a")
    tid = task["task_id"]
    async with httpx.AsyncClient(base_url=live.base_url, cookies={"host": "a-actor"}) as own:
        page = await own.get(f"/console/tasks/{tid}")
        assert page.status_code == 200
        answer = await own.post(
            f"/console/api/tasks/{tid}/approvals/{approval_id}",
            json={"decision": "approve", "scope": "task"},
            headers={"x-console-csrf": csrf_of(page.text)},
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden"
    assert live.gateway.approvals.pending(tid)
    await live.gateway.approvals.decide(
        (await live.gateway.tasks.get(tid)).identity,
        approval_id,
        Decision("deny", "call", "ops", "admin", "control"),
    )
    assert (await call).status == "denied"


async def test_a_video_plays_only_at_the_console_and_only_one_the_browser_recorded(
    live: Live,
) -> None:
    # The task is live (its browser idled out and closed, say): its tokens still verify.
    task = await live.create_task()
    ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    webm = b"\x1aE\xdf\xa3" + b"\x00" * 60
    video = await live.gateway.store.put_artifact(
        ident, webm, name="video.webm", media_type="video/webm"
    )
    shot = await live.gateway.store.put_artifact(
        ident, PIXEL, name="screenshot.png", media_type="image/png"
    )
    base = f"/console/tasks/{task['task_id']}/videos"
    url = f"{base}/{video.id}/video.webm"
    # Not yet named by the browser's closing record: not a video of the task's browser.
    assert (await live.http.get(url, headers=live.control)).status_code == 404
    await live.gateway.events.record(
        ident, "browser_closed", {"videos": [video.public(), shot.public()]}
    )
    played = await live.http.get(url, headers=live.control)
    assert played.status_code == 200
    assert played.headers["content-type"] == "video/webm"
    assert played.content == webm
    # The player seeks by asking for a part of it.
    part = await live.http.get(url, headers={**live.control, "range": "bytes=4-9"})
    assert part.status_code == 206
    assert part.headers["content-range"] == f"bytes 4-9/{len(webm)}"
    assert part.content == webm[4:10]
    past = await live.http.get(url, headers={**live.control, "range": "bytes=999-"})
    assert past.status_code == 416
    # Another artifact of the task named there is still not served as a video.
    other = await live.http.get(f"{base}/{shot.id}/video.webm", headers=live.control)
    assert other.status_code == 404
    # The task's own tokens fetch it neither here nor as an artifact of the task (which
    # they may read otherwise: its screenshot).
    for purpose, token in task["tokens"].items():
        bearer = {"authorization": f"Bearer {token}"}
        assert (await live.http.get(url, headers=bearer)).status_code == 401, purpose
    agent = {"authorization": f"Bearer {task['tokens']['agent']}"}
    assert (await live.http.get(f"/v1/artifacts/{video.id}", headers=agent)).status_code == 404
    assert (await live.http.get(f"/v1/artifacts/{shot.id}", headers=agent)).status_code == 200
    assert (
        await live.http.get(f"/v1/artifacts/{video.id}", headers=live.control)
    ).status_code == 200
    # The export holds it.
    exported = await live.http.get(
        f"/console/tasks/{task['task_id']}/export.zip", headers=live.control
    )
    archive = zipfile.ZipFile(io.BytesIO(exported.content))
    assert archive.read(f"videos/{video.id}.webm") == webm


def page_seqs(page: str) -> list[int]:
    return [int(s) for s in re.findall(r'<li class="entry[^"]*" data-seq="(\d+)"', page)]


def cursor(page: str, name: str) -> str | None:
    found = re.search(rf'href="([^"]+)" rel="\w+" data-testid="{name}"', page)
    return found.group(1).replace("&amp;", "&") if found else None


async def test_a_task_of_twenty_thousand_records_is_read_to_its_end_page_by_page(
    live: Live,
) -> None:
    task = await live.create_task()
    ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    events = live.gateway.events
    await events.record(ident, "browser_closed", {"trace": {"artifact_id": "art_first"}})
    for start in range(0, 20_000, 1000):
        rows = [events.row(ident, "note", {"n": n})[1] for n in range(start, start + 1000)]
        await live.gateway.store.commit(rows)
    await live.gateway.store.commit([events.row(ident, "sandbox.down", {"why": "last"})[1]])
    stored = [
        r["seq"]
        for r in await live.gateway.store.evidence_for(ident.org_id, ident.task_id, limit=30_000)
    ]
    assert len(stored) == 20_002
    url: str | None = f"/console/tasks/{task['task_id']}"
    read: list[int] = []
    pages = []
    while url is not None:
        answer = await live.http.get(url, headers=live.control)
        assert answer.status_code == 200, answer.text[:300]
        pages.append(answer.text)
        read.extend(page_seqs(answer.text))
        url = cursor(answer.text, "newer")
    # Every record once, in order, the last one on the last page; every page but the
    # last is full, and only the last follows the task live.
    assert read == stored
    assert len(pages) == 5
    assert [len(page_seqs(p)) for p in pages[:-1]] == [5000] * 4
    assert "sandbox.down" in pages[-1]
    assert all('data-follow="false"' in p for p in pages[:-1])
    assert 'data-follow="true"' in pages[-1]
    # The first page has no older one; the trace named on it is linked on every page.
    assert cursor(pages[0], "older") is None
    assert all("art_first" in p for p in pages)
    # Back from the end, page by page, by the older cursor.
    back: list[int] = []
    url = cursor(pages[-1], "older")
    while url is not None:
        answer = await live.http.get(url, headers=live.control)
        back = page_seqs(answer.text) + back
        url = cursor(answer.text, "older")
    assert back + page_seqs(pages[-1]) == stored
    # A cursor of both kinds at once is refused.
    both = await live.http.get(
        f"/console/tasks/{task['task_id']}?after=1&before=9", headers=live.control
    )
    assert both.status_code == 422


async def test_a_cursor_past_every_record_finds_none_on_either_database(live: Live) -> None:
    task = await live.create_task()
    tid = task["task_id"]
    ident = await live.gateway.tasks.authenticate(task["tokens"]["agent"], Purpose.AGENT)
    await live.gateway.events.record(ident, "note", {"n": 1})
    far = 2**40
    polled = await live.http.get(f"/console/api/tasks/{tid}/live?after={far}", headers=live.control)
    assert polled.status_code == 200
    assert polled.json()["entries_html"] == ""
    beyond = await live.http.get(f"/console/tasks/{tid}?after={far}", headers=live.control)
    assert beyond.status_code == 200 and page_seqs(beyond.text) == []
    assert cursor(beyond.text, "older") is not None
    newest = await live.http.get(f"/console/tasks/{tid}?before={far}", headers=live.control)
    assert len(page_seqs(newest.text)) == 1
