"""A download a task's page started, kept as an artifact of the task within its bound.

Chromium's own download is cancelled (a jailed Chromium's user may not write where
Playwright keeps downloads): the page that started it reads the file again, through the
guard, from its own origin (or its blob: or data: URL), bounded as it streams. What it hands
over is checked again here, since the reading runs in the page's own world. Kept or refused,
the download is recorded and the next call's result says so (`downloads`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

from playwright.async_api import Download
from playwright.async_api import Error as PlaywrightError

from gateway.core.errors import ToolFailure

from .errors import first_line
from .policy import page_url_allowed
from .session_state import SessionState

DOWNLOAD_TIMEOUT_S = 60.0


def downloaded(got: Any, limit: int) -> tuple[str | None, bytes]:
    """What the page's reading of a download gave: its bytes, or why none are kept.
    The bound is checked here again: the reading runs in the page's own world, whose
    functions the page may have replaced."""
    if not isinstance(got, dict):
        return "its reading gave no bytes", b""
    if "over" in got:
        return f"it is over the bound of {limit} bytes", b""
    if "status" in got:
        return f"the app answered {str(got['status'])[:40]}", b""
    encoded = got.get("data")
    # Base64 holds 3 bytes in 4 characters: a longer text is over the bound as it is.
    if not isinstance(encoded, str) or len(encoded) > 4 * (limit // 3 + 1):
        return f"it is over the bound of {limit} bytes", b""
    try:
        data = base64.b64decode(encoded, validate=True)
    except ValueError:
        return "its reading gave no bytes", b""
    if len(data) > limit:
        return f"it is over the bound of {limit} bytes", b""
    return None, data


async def keep_download(session: SessionState, download: Download) -> None:
    """The downloaded file as an artifact of the task, when it is within the bound and
    the task's artifact quota; else it is refused, and the refusal recorded."""
    identity = session.identity
    url = download.url
    name = download.suggested_filename[:200] or "download"
    with contextlib.suppress(PlaywrightError):
        await download.cancel()
    refusal: str | None = None
    data = b""
    if not (page_url_allowed(url, session.origins) or url.startswith(("blob:", "data:"))):
        refusal = "its URL is not on the task's origins"
    else:
        try:
            got = await asyncio.wait_for(
                download.page.evaluate(
                    _READ_DOWNLOAD, {"url": url, "limit": session.download_max_bytes}
                ),
                DOWNLOAD_TIMEOUT_S,
            )
        except TimeoutError:
            refusal = "it did not finish in time"
        except PlaywrightError as exc:
            refusal = f"it could not be read: {first_line(exc)}"
        else:
            refusal, data = downloaded(got, session.download_max_bytes)
    if identity is None:
        return
    if refusal is None:
        try:
            ref = await session.sink.put_artifact(identity, data, name, "application/octet-stream")
        except ToolFailure as exc:
            refusal = exc.message
        except Exception as exc:  # the store's quota, or the store itself
            refusal = str(exc)[:300]
        else:
            kept = {"url": url[:512], "name": name, "artifact": ref.public()}
            session.note("downloads", kept)
            await session.sink.record(identity, "download_kept", kept)
            return
    refused = {"url": url[:512], "name": name, "refused": refusal}
    session.note("downloads", refused)
    await session.sink.record(identity, "download_refused", refused)


# Reads a download's bytes in the page that started it, stopping past `limit`.
_READ_DOWNLOAD = """async ({url, limit}) => {
  const response = await fetch(url, {credentials: "include"});
  if (!response.ok) return {status: response.status};
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) { await reader.cancel(); return {over: size}; }
    chunks.push(value);
  }
  let text = "";
  for (const chunk of chunks) {
    for (let i = 0; i < chunk.length; i += 0x8000) {
      text += String.fromCharCode.apply(null, chunk.subarray(i, i + 0x8000));
    }
  }
  return {data: btoa(text)};
}"""
