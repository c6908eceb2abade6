"""The HTTP edges, attacked: numbers that overflow or are not ASCII, identifiers that would
climb out of a folder, Host and Origin spellings, caches, slow clients, and 404s that would
tell one missing thing from another task's."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from gateway import serving
from gateway.core.tokens import Purpose
from tests.conftest import Live, task_body

DASHBOARD = "http://127.0.0.1:8765"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "query",
    [
        "after=99999999999999999999999999",
        "after=%D9%A3",  # an Arabic-Indic three
        "after=%C2%B2",  # a superscript two
        "limit=+5",
        "after=1_000",
        "after=%201",
        "after=-1",
        "limit=0x10",
    ],
)
async def test_evidence_numbers_are_bounded_ascii(live: Live, query: str) -> None:
    task = await live.create_task()
    answer = await live.http.get(
        f"/v1/tasks/{task['task_id']}/evidence?{query}", headers=live.control
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("name", ["..", ".", "-x", ".hidden", "a/b", "a\\b", ""])
@pytest.mark.parametrize("field", ["org", "actor"])
async def test_identifiers_that_reach_paths_are_names(live: Live, name: str, field: str) -> None:
    answer = await live.http.post(
        "/v1/tasks", json=task_body(**{field: name}), headers=live.control
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/v1/tasks/x", "/webmcp.js"])
async def test_every_route_refuses_a_foreign_host(live: Live, path: str) -> None:
    answer = await live.http.get(path, headers={"host": "attacker.example"})
    assert answer.status_code == 421
    assert answer.json()["error"]["code"] == "forbidden"
    assert (await live.http.get(path, headers={"host": "127.0.0.1:1234"})).status_code != 421


async def test_a_tab_handshake_with_a_foreign_host_is_refused(live: Live) -> None:
    host, port = live.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/tabs HTTP/1.1\r\nHost: evil.example\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: "
        + DASHBOARD.encode()
        + b"\r\n\r\n"
    )
    status = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    assert status.startswith(b"HTTP/1.1 403"), status


@pytest.mark.parametrize(
    "origin",
    [
        "HTTP://127.0.0.1:8765",
        "http://127.0.0.1:8765/",
        "http://127.0.0.1.:8765",
        "http://127.0.0.1:08765",
        "http://localhost:8765",
    ],
)
async def test_origin_spellings_are_not_the_dashboards_origin(live: Live, origin: str) -> None:
    url = live.base_url.replace("http://", "ws://") + "/v1/tabs"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, origin=origin):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403
    shim = await live.http.get("/webmcp.js", headers={"origin": origin})
    assert "access-control-allow-origin" not in shim.headers
    exact = await live.http.get("/webmcp.js", headers={"origin": DASHBOARD})
    assert exact.headers["access-control-allow-origin"] == DASHBOARD


async def test_answers_with_tokens_or_evidence_are_not_cached(live: Live) -> None:
    created = await live.http.post("/v1/tasks", json=task_body(), headers=live.control)
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    task = created.json()
    for path in (f"/v1/tasks/{task['task_id']}", f"/v1/tasks/{task['task_id']}/evidence"):
        read = await live.http.get(path, headers=bearer(task["tokens"]["agent"]))
        assert read.headers["cache-control"] == "no-store", path
    refused = await live.http.get("/v1/tasks/x", headers=bearer("no-such-token-0123"))
    assert refused.headers["cache-control"] == "no-store"


async def test_another_tasks_token_cannot_tell_an_artifact_from_a_missing_one(live: Live) -> None:
    owner = await live.create_task()
    other = await live.create_task(actor="user_2")
    identity = await live.gateway.tasks.authenticate(owner["tokens"]["agent"], _agent())
    ref = await live.gateway.store.put_artifact(
        identity, b"secret plan", name="plan.txt", media_type="text/plain"
    )
    answers = []
    for artifact_id in (ref.id, "art_00000000000000000000"):
        answer = await live.http.get(
            f"/v1/artifacts/{artifact_id}", headers=bearer(other["tokens"]["agent"])
        )
        answers.append((answer.status_code, answer.json()))
    assert answers[0] == answers[1] == (404, answers[0][1])
    assert answers[0][1]["error"]["code"] == "not_found"
    # Without a credential both are refused the same way too, before any lookup.
    bare = [(await live.http.get(f"/v1/artifacts/{a}")).status_code for a in (ref.id, "art_x")]
    assert bare == [401, 401]
    mine = await live.http.get(f"/v1/artifacts/{ref.id}", headers=bearer(owner["tokens"]["agent"]))
    assert mine.status_code == 200 and mine.content == b"secret plan"


async def _trickle(base_url: str, lines: int, every_s: float) -> bool:
    """Send a request head one header line at a time; True if the server hung up first."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(lines):
            await asyncio.sleep(every_s)
            if reader.at_eof():
                return True
            writer.write(f"X-Slow-{i}: x\r\n".encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(1), 0.001) == b"":
                    return True
        return False
    except ConnectionError:
        return True
    finally:
        writer.close()


async def test_slow_request_heads_are_cut_off(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "HEAD_TIMEOUT_S", 0.5)
    # A fresh connection is armed at accept: the setting holds for the ones opened now.
    hung_up = await asyncio.gather(*(_trickle(live.base_url, 20, 0.2) for _ in range(300)))
    assert all(hung_up), hung_up.count(False)
    # An honest client is not affected.
    async with httpx.AsyncClient(base_url=live.base_url) as client:
        assert (await client.get("/healthz")).status_code == 200


def _agent() -> Purpose:
    return Purpose.AGENT
