"""The video of a task's browser, for a task created with `record_video`.

Playwright records a video of each page of a context opened with `record_video_dir` (the
pool opens a fresh one for such a task: a warm context was opened without it) and
finishes the file when the context closes. Each of the task's pages' videos is then kept
as an artifact of the task (`video/webm`), within its artifact quota: a video over it is
not kept, and the context's closing record says why. `save_as` reads the file through the
driver, so a remote browser's videos come back the same way.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Video

from gateway.core.errors import GatewayError
from gateway.core.identity import TaskIdentity
from gateway.core.store.artifacts import VIDEO_MEDIA_TYPE, ArtifactRef

from .errors import first_line

NAME = "video.webm"
SAVE_TIMEOUT_S = 30.0

PutArtifact = Callable[[TaskIdentity, bytes, str, str], Awaitable[ArtifactRef]]


class VideoRecording:
    """The videos of one context's pages, from its opening to its closing."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gateway-video-"))
        self._videos: list[Video] = []

    def watch(self, page: Page) -> None:
        """A page of the task: its video is kept (a refused popup's is not)."""
        video = page.video
        if video is not None and video not in self._videos:
            self._videos.append(video)

    async def keep(self, identity: TaskIdentity, put_artifact: PutArtifact) -> dict[str, Any]:
        """After the context closed: each video kept, or why not, for its closing record."""
        kept: list[dict[str, Any]] = []
        refused: list[str] = []
        for index, video in enumerate(self._videos):
            path = self.folder / f"kept-{index}.webm"
            try:
                await asyncio.wait_for(video.save_as(path), SAVE_TIMEOUT_S)
                data = await asyncio.to_thread(path.read_bytes)
            except (PlaywrightError, OSError, TimeoutError) as exc:
                refused.append(f"the video could not be read: {_why(exc)}")
                continue
            try:
                ref = await put_artifact(identity, data, NAME, VIDEO_MEDIA_TYPE)
            except GatewayError as exc:  # the task's artifact quota, or the store
                refused.append(f"the video was not kept: {exc.message}")
                continue
            kept.append(ref.public())
        out: dict[str, Any] = {}
        if kept:
            out["videos"] = kept
        if refused:
            out["video_refused"] = refused
        return out

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "it did not finish in time"
    if isinstance(exc, PlaywrightError):
        return first_line(exc)
    return str(exc)[:300]
