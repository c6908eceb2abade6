"""Where a task's browser writes what it saw, and the trace it keeps of the task.

`EvidenceSink` is the gateway's evidence and artifact store as a session sees it. A task
run with a trace keeps the context's Playwright trace as an artifact when it closes, with
every secret the task typed, its pages held or its storage state gave taken out
(`trace_scrub`): the artifact keeps nothing the evidence redacts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page

from gateway.core.identity import TaskIdentity
from gateway.core.store.artifacts import ArtifactRef
from gateway.core.tasks.log import Level

from . import trace_scrub
from .snapshot import PRIVATE_FIELD_VALUES

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class EvidenceSink:
    """Where a session writes what it saw: the gateway's evidence and artifact store."""

    record: Callable[[TaskIdentity, str, Mapping[str, Any]], Awaitable[Any]]
    # For kinds that come in floods (refused requests): aggregated per task and window.
    repeated: Callable[[TaskIdentity, str, Mapping[str, Any]], None]
    # What the page says as it happens (console errors, uncaught errors), for listeners.
    log: Callable[[str, Level, str, dict[str, Any]], None]
    put_artifact: Callable[[TaskIdentity, bytes, str, str], Awaitable[ArtifactRef]]
    # An artifact by id, whoever's (uploads.py checks it is the task's own), and its bytes.
    get_artifact: Callable[[str], Awaitable[ArtifactRef]] | None = None
    read_artifact: Callable[[ArtifactRef], Awaitable[bytes]] | None = None


async def secret_values(page: Page) -> set[str]:
    """The values of the password fields of every frame of the page."""
    values: set[str] = set()
    for found in await asyncio.gather(
        *(frame.evaluate(PRIVATE_FIELD_VALUES) for frame in page.frames), return_exceptions=True
    ):
        if isinstance(found, list):
            values.update(v for v in found if isinstance(v, str))
    return values


async def save_trace(
    context: BrowserContext,
    pages: Iterable[Page],
    held_secrets: set[str],
    other_secrets: Iterable[str],
    *,
    drop_images: bool,
    identity: TaskIdentity,
    sink: EvidenceSink,
) -> ArtifactRef | None:
    """The context's trace, with every secret the task typed or its pages held taken out
    (`trace_scrub`). `held_secrets` gains what the pages hold as they close."""
    try:
        for page in pages:
            with contextlib.suppress(TimeoutError):
                held_secrets |= await asyncio.wait_for(secret_values(page), 2.0)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.zip"
            await asyncio.wait_for(context.tracing.stop(path=str(path)), CLOSE_TIMEOUT_S)
            data = await asyncio.to_thread(path.read_bytes)
        data = await asyncio.to_thread(
            trace_scrub.scrub, data, held_secrets | set(other_secrets), drop_images=drop_images
        )
        return await sink.put_artifact(identity, data, "trace.zip", "application/zip")
    except Exception as exc:
        log.warning("the trace of task %s could not be kept: %r", identity.task_id, exc)
        return None
