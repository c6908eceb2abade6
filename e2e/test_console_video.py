"""A video of the task browser, for a task that asks for one, in real Chromium: the task's
pages are recorded, the video is kept as an artifact of the task when its context closes,
listed in the console and played there, and included in the export. A task that did not
ask has none, a task token cannot fetch one, and a video over the task's artifact quota is
not kept, which its timeline says."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from examples.synthetic_app.serve import ExampleStack, running_stack
from gateway.console.links import video_link
from gateway.core.identity import TaskIdentity
from gateway.core.results import Door
from gateway.core.tokens import Purpose
from gateway.testing import task_body, test_settings

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# Each task below takes a screenshot or two (each an artifact): a task that takes three
# leaves no room for its video.
QUOTA = 3
# With `CONSOLE_SCREENSHOTS=<dir>`, the player is pictured there (docs/img/console-video.png).
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")


@pytest_asyncio.fixture(loop_scope="session")
async def example(tmp_path: Path) -> AsyncIterator[ExampleStack]:
    settings = test_settings(tmp_path / "data", example=True, max_artifacts_per_task=QUOTA)
    async with running_stack(settings, step_s=0.05) as stack:
        yield stack


def control(stack: ExampleStack) -> dict[str, str]:
    return {"authorization": f"Bearer {stack.gateway.settings.control_key}"}


async def browsed_task(
    stack: ExampleStack, *, screenshots: int, **extra: Any
) -> tuple[TaskIdentity, dict[str, str]]:
    """A task whose agent opens the app's sign-in page in the task browser, types into its
    fields and takes `screenshots` pictures; then the task ends."""
    async with httpx.AsyncClient(base_url=stack.gateway_url) as http:
        body = task_body(
            org="org_acme",
            actor="ada",
            scopes=["browser"],
            app_origin=stack.sandbox_url or stack.dashboard_url,
            **extra,
        )
        created = await http.post("/v1/tasks", json=body, headers=control(stack))
    assert created.status_code == 201, created.text
    tokens = created.json()["tokens"]
    identity = await stack.gateway.tasks.authenticate(tokens["agent"], Purpose.AGENT)

    async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        done = await stack.gateway.pipeline.call(identity, tool, args, door=Door.MCP)
        assert done.status == "succeeded", done
        return done.public()

    await call("browser.navigate", {"url": f"{identity.sandbox.app_origin}/signin"})
    await asyncio.sleep(0.5)
    for _ in range(screenshots):
        await call("browser.screenshot", {})
    await stack.gateway.tasks.end(identity.task_id)
    return identity, tokens


async def closing_record(stack: ExampleStack, identity: TaskIdentity) -> dict[str, Any]:
    for _ in range(600):
        records = await stack.gateway.store.evidence_for(
            identity.org_id, identity.task_id, limit=5000
        )
        for record in records:
            if record.get("kind") == "browser_closed":
                data: dict[str, Any] = record["data"]
                return data
        await asyncio.sleep(0.05)
    raise AssertionError("the task browser's context did not close")


def probe(data: bytes, folder: Path) -> dict[str, Any]:
    """What ffprobe reads of a webm: its codec, size, frames and duration."""
    path = folder / "probed.webm"
    path.write_bytes(data)
    ffprobe = shutil.which("ffprobe")
    assert ffprobe, "ffprobe comes with Debian's ffmpeg package (scripts/ensure-browser)"
    out = subprocess.run(
        [
            ffprobe,
            "-v",
            "error",
            "-count_frames",
            "-of",
            "json",
            "-show_entries",
            "stream=codec_name,width,height,nb_read_frames:format=duration",
            str(path),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    found: dict[str, Any] = json.loads(out.stdout)
    return found


async def console_page(browser: Any, stack: ExampleStack) -> tuple[Any, Any]:
    context = await browser.new_context(viewport={"width": 1360, "height": 900})
    page = await context.new_page()
    await page.goto(f"{stack.gateway_url}/console/sign-in")
    await page.fill("#key", stack.gateway.settings.control_key or "")
    await page.click('button[type="submit"]')
    await page.wait_for_selector('[data-testid="tasks"]')
    return context, page


async def test_a_task_that_asks_for_a_video_is_recorded_and_played_in_the_console(
    dashboard_browser: Any, example: ExampleStack, tmp_path: Path
) -> None:
    identity, tokens = await browsed_task(example, screenshots=1, record_video=True)
    closed = await closing_record(example, identity)
    assert "video_refused" not in closed, closed
    [video] = closed["videos"]
    assert video["media_type"] == "video/webm" and video["size"] > 0
    url = video_link(identity.task_id, video["artifact_id"])

    async with httpx.AsyncClient(base_url=example.gateway_url) as http:
        # The task's own tokens open nothing of the console, its video included.
        for purpose in ("agent", "tab", "bridge"):
            refused = await http.get(url, headers={"authorization": f"Bearer {tokens[purpose]}"})
            assert refused.status_code == 401, (purpose, refused.status_code)
        assert (await http.get(url)).status_code == 401
        served = await http.get(url, headers=control(example))
        assert served.status_code == 200
        assert served.headers["content-type"] == "video/webm"
        exported = await http.get(
            f"/console/tasks/{identity.task_id}/export.zip", headers=control(example)
        )
    assert exported.status_code == 200
    # A webm of the task's page: frames over a duration, as Debian's ffmpeg encoded them.
    probed = probe(served.content, tmp_path)
    [stream] = probed["streams"]
    assert stream["codec_name"] in ("vp8", "vp9")
    assert int(stream["width"]) > 0 and int(stream["nb_read_frames"]) >= 1
    assert float(probed["format"]["duration"]) > 0
    with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
        assert archive.read(f"videos/{video['artifact_id']}.webm") == served.content

    # The console lists it and plays it, behind its sign-in.
    context, page = await console_page(dashboard_browser, example)
    try:
        await page.goto(f"{example.gateway_url}/console/tasks/{identity.task_id}")
        player = page.locator('[data-testid="video"]')
        assert await player.count() == 1
        played = await page.wait_for_function(
            """async (video) => {
                if (video.readyState < 1) return false;
                return {width: video.videoWidth, ready: video.readyState, error: video.error};
            }""",
            arg=await player.element_handle(),
        )
        state = await played.json_value()
        assert state["width"] > 0 and state["error"] is None, state
        await player.evaluate("v => { v.muted = true; return v.play(); }")
        await page.wait_for_function("v => v.currentTime > 0", arg=await player.element_handle())
        if SHOTS:
            # A frame of the task's page, not the blank one before its first navigation.
            await player.evaluate(
                """v => new Promise(done => {
                    v.pause();
                    v.addEventListener("seeked", done, {once: true});
                    v.currentTime = v.duration - 0.5;
                })"""
            )
            section = page.locator("section", has=player)
            await section.screenshot(path=str(Path(SHOTS) / "console-video.png"))
    finally:
        await context.close()


async def test_a_task_that_did_not_ask_has_no_video(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    identity, _ = await browsed_task(example, screenshots=1)
    closed = await closing_record(example, identity)
    assert "videos" not in closed and "video_refused" not in closed
    refs = await example.gateway.store.artifacts_of(identity.org_id, identity.task_id)
    assert [r.media_type for r in refs] == ["image/png"]
    context, page = await console_page(dashboard_browser, example)
    try:
        await page.goto(f"{example.gateway_url}/console/tasks/{identity.task_id}")
        await page.wait_for_selector('[data-testid="timeline"]')
        assert await page.locator('[data-testid="video"]').count() == 0
    finally:
        await context.close()


async def test_a_video_over_the_tasks_artifact_quota_is_not_kept_and_the_timeline_says_so(
    dashboard_browser: Any, example: ExampleStack
) -> None:
    identity, _ = await browsed_task(example, screenshots=QUOTA, record_video=True)
    closed = await closing_record(example, identity)
    assert "videos" not in closed
    [why] = closed["video_refused"]
    assert "not kept" in why and str(QUOTA) in why, why
    refs = await example.gateway.store.artifacts_of(identity.org_id, identity.task_id)
    assert "video/webm" not in [r.media_type for r in refs]
    context, page = await console_page(dashboard_browser, example)
    try:
        await page.goto(f"{example.gateway_url}/console/tasks/{identity.task_id}")
        line = page.locator('[data-testid="timeline"] li[data-category="recording"] .title')
        assert "the video was not kept" in (await line.text_content() or "")
        assert await page.locator('[data-testid="video"]').count() == 0
    finally:
        await context.close()
