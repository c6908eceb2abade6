"""The shim's locality hint: a page that knows its task id opens its tab channel at
`/v1/tabs?task=<id>`, the query parameter a cluster's balancer hashes on (docs/deploy.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from e2e.conftest import E2E
from gateway.core.tokens import Purpose
from gateway.tabs import ShowRunProgress

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def opened_sockets(page: Any) -> list[str]:
    """The URLs of the websockets `page` opens from now on, in order."""
    urls: list[str] = []
    page.on("websocket", lambda ws: urls.append(ws.url))
    return urls


async def test_a_page_given_its_task_id_hints_it_in_the_websocket_url(e2e: E2E) -> None:
    body = await e2e.live.create_task()
    task_id = body["task_id"]
    identity = await e2e.live.gw.tasks.authenticate(body["tokens"]["tab"], Purpose.TAB)
    page = await e2e.page()
    urls = opened_sockets(page)
    async with page.expect_websocket() as opening:
        started = await e2e.start(page, body["tokens"]["tab"], task=task_id, webmcp=False)
    ws = await opening.value
    url = urlsplit(ws.url)
    assert (url.path, parse_qs(url.query)) == ("/v1/tabs", {"task": [task_id]})
    # The gateway ignores the hint but not the channel: the tab is the task's, and works.
    assert started["task_id"] == task_id
    assert await page.evaluate("window.session.connected") is True
    outcome = await e2e.live.hub.send(identity, ShowRunProgress(run_id="run_1"), timeout_s=10)
    assert outcome.ok and outcome.result == {"shown": "run_1"}
    # A reconnect keeps the hint, so the tab comes back to the same node.
    await page.evaluate("window.session._ws.close(4000, 'dropped')")
    await e2e.wait_event(page, "welcome")  # the first came before the page listened
    assert urls == [ws.url, ws.url]


async def test_without_a_task_id_the_url_carries_no_query(e2e: E2E) -> None:
    body = await e2e.live.create_task()
    page = await e2e.page()
    async with page.expect_websocket() as opening:
        await e2e.start(page, body["tokens"]["tab"], webmcp=False)
    assert urlsplit((await opening.value).url).query == ""


@pytest.mark.parametrize("task", ["../x", "task_X", "task_" + "A" * 24, 42, ""])
async def test_a_malformed_task_id_is_refused_before_any_socket(e2e: E2E, task: Any) -> None:
    body = await e2e.live.create_task()
    page = await e2e.page()
    urls = opened_sockets(page)
    options = {"gateway": e2e.live.base_url, "token": body["tokens"]["tab"], "task": task}
    message = await page.evaluate("(o) => window.tryStart(o)", options)
    assert message.startswith("connectGateway's task must be the task's id"), message
    # Websocket events come in order: had the refused call opened one, it would come first.
    async with page.expect_websocket():
        await e2e.start(page, body["tokens"]["tab"], task=body["task_id"], webmcp=False)
    assert len(urls) == 1 and parse_qs(urlsplit(urls[0]).query) == {"task": [body["task_id"]]}
