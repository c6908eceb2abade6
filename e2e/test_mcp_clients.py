"""Screenshots reach a model as pictures: an MCP image block of the true type, scaled to
what a model takes, beside the artifact's ref, through both official SDK clients."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.core.png import png_size
from gateway.mcp_door.images import MAX_PIXELS, MAX_SIDE
from gateway.testing import LiveGateway, live_gateway, test_settings
from mcp import Client
from tests.browser.conftest import Sites
from tests.clients.npm import ensure_installed, ts_agent

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def gateway(tmp_path: Path, sites: Sites) -> AsyncIterator[LiveGateway]:
    async with live_gateway(test_settings(tmp_path / "data")) as live:
        yield live


async def _task(live: LiveGateway, sites: Sites) -> dict[str, Any]:
    return await live.create_task(scopes=["browser"], app_origin=sites.allowed)


async def test_the_typescript_client_gets_the_screenshot_as_an_image(
    gateway: LiveGateway, sites: Sites
) -> None:
    ensure_installed()
    task = await _task(gateway, sites)
    plan = {"url": f"{gateway.base_url}/v1/mcp", "token": task["tokens"]["agent"]}
    opened = await ts_agent(
        {**plan, "scenario": "call", "tool": "browser_navigate", "arguments": {"url": "/tall"}}
    )
    assert opened["structured"]["status"] == "succeeded", opened
    shot = await ts_agent(
        {**plan, "scenario": "call", "tool": "browser_screenshot", "arguments": {"full_page": True}}
    )
    assert shot["structured"]["status"] == "succeeded", shot
    output = shot["structured"]["output"]
    # The artifact keeps the whole page; the image block is scaled to fit.
    assert output["height"] > 4000 and output["artifact"]["media_type"] == "image/png"
    [text, image, link] = shot["content"]
    assert text["type"] == "text" and text["text"].startswith("browser.screenshot succeeded")
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    # The whole page is a link away, not in the answer.
    assert link == {
        "type": "resource_link",
        "uri": f"gateway://artifacts/{output['artifact']['artifact_id']}",
        "mimeType": "image/png",
        "size": output["artifact"]["size"],
    }
    width, height = image["size"]
    assert max(width, height) <= MAX_SIDE and width * height <= MAX_PIXELS
    assert abs(width / height - output["width"] / output["height"]) < 0.02


async def test_the_python_client_gets_the_visible_page_unscaled(
    gateway: LiveGateway, sites: Sites
) -> None:
    task = await _task(gateway, sites)
    headers = {"authorization": f"Bearer {task['tokens']['agent']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
        Client(streamable_http_client(f"{gateway.base_url}/v1/mcp", http_client=http)) as client,
    ):
        assert not (await client.call_tool("browser_navigate", {"url": "/"})).is_error
        result = await client.call_tool("browser_screenshot", {})
    output = result.structured_content["output"]
    image = result.content[1]
    assert image.type == "image" and image.mime_type == "image/png"
    data = base64.b64decode(image.data)
    assert png_size(data) == (output["width"], output["height"])  # within bounds: as taken


async def test_a_setting_leaves_the_image_out_for_clients_that_reject_images(
    tmp_path: Path, sites: Sites
) -> None:
    async with live_gateway(test_settings(tmp_path / "data", mcp_image_blocks=False)) as live:
        task = await _task(live, sites)
        headers = {"authorization": f"Bearer {task['tokens']['agent']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
            Client(streamable_http_client(f"{live.base_url}/v1/mcp", http_client=http)) as client,
        ):
            assert not (await client.call_tool("browser_navigate", {"url": "/"})).is_error
            result = await client.call_tool("browser_screenshot", {})
    assert [block.type for block in result.content] == ["text", "resource_link"]
    assert result.structured_content["output"]["artifact"]["artifact_id"].startswith("art_")


async def test_a_screenshots_link_is_read_with_the_agent_token_and_no_other(
    gateway: LiveGateway, sites: Sites
) -> None:
    task = await _task(gateway, sites)
    other = await _task(gateway, sites)

    @contextlib.asynccontextmanager
    async def client(token: str) -> AsyncIterator[Client]:
        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
            Client(streamable_http_client(f"{gateway.base_url}/v1/mcp", http_client=http)) as c,
        ):
            yield c

    async with client(task["tokens"]["agent"]) as agent:
        assert not (await agent.call_tool("browser_navigate", {"url": "/tall"})).is_error
        shot = await agent.call_tool("browser_screenshot", {"full_page": True})
        [link] = [block for block in shot.content if block.type == "resource_link"]
        read = await agent.read_resource(link.uri)
    [contents] = read.contents
    data = base64.b64decode(contents.blob)  # type: ignore[union-attr]
    output = shot.structured_content["output"]
    assert png_size(data) == (output["width"], output["height"])  # the whole page, unscaled
    assert len(data) == link.size
    async with client(other["tokens"]["agent"]) as stranger:
        with pytest.raises(MCPError):
            await stranger.read_resource(link.uri)


async def test_the_page_errors_reach_a_client_that_asked_for_the_log(
    gateway: LiveGateway, sites: Sites
) -> None:
    ensure_installed()
    task = await _task(gateway, sites)
    plan = {"url": f"{gateway.base_url}/v1/mcp", "token": task["tokens"]["agent"]}
    heard = await ts_agent(
        {
            **plan,
            "scenario": "logs",
            "level": "warning",
            "tool": "browser_navigate",
            "arguments": {"url": "/noisy", "snapshot": False},
        }
    )
    assert heard["structured"]["status"] == "succeeded", heard
    said = {
        (m["logger"], m["level"], m["data"].get("text") or m["data"].get("error"))
        for m in heard["messages"]
    }
    assert ("browser.console", "error", "noisy page: code 42") in said
    assert ("browser.page", "error", "uncaught boom") in said
    # Below the level asked for: the tab's info messages are not sent.
    assert all(m["level"] in ("warning", "error") for m in heard["messages"])


async def test_the_tasks_artifacts_are_resources_of_its_own(
    gateway: LiveGateway, sites: Sites
) -> None:
    ensure_installed()
    task = await _task(gateway, sites)
    other = await _task(gateway, sites)
    plan = {"url": f"{gateway.base_url}/v1/mcp", "token": task["tokens"]["agent"]}
    other_plan = {"url": f"{gateway.base_url}/v1/mcp", "token": other["tokens"]["agent"]}
    await ts_agent(
        {**plan, "scenario": "call", "tool": "browser_navigate", "arguments": {"url": "/"}}
    )
    shot = await ts_agent({**plan, "scenario": "call", "tool": "browser_screenshot"})
    artifact = shot["structured"]["output"]["artifact"]
    listed = await ts_agent({**plan, "scenario": "resources"})
    assert [r["uri"] for r in listed["resources"]] == [
        f"gateway://artifacts/{artifact['artifact_id']}"
    ]
    [read] = listed["read"]
    assert read["mimeType"] == "image/png" and read["blobBytes"] == artifact["size"]
    # Another task's token neither lists nor reads it.
    theirs = await ts_agent(
        {**other_plan, "scenario": "resources", "foreign_uri": listed["resources"][0]["uri"]}
    )
    assert theirs["resources"] == [] and theirs["foreign"] != "read"
