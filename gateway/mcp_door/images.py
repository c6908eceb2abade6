"""Screenshots for a model to see: an MCP image block beside the artifact's ref.

A result whose output names an image artifact (`output.artifact.media_type` is `image/*`,
as `browser.screenshot`'s does) gets an image block with the picture itself, scaled down
to at most 1568 px a side and 1.15 megapixels (what vision models take without resizing
it themselves), labelled with its true type. The artifact keeps the full picture. The
setting `GATEWAY_MCP_IMAGE_BLOCKS=false` leaves the block out for clients that reject
images.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from PIL import Image

from gateway.core.identity import TaskIdentity
from gateway.core.png import png_size
from gateway.core.results import ToolResult

MAX_SIDE = 1568
MAX_PIXELS = 1_150_000

ImageReader = Callable[[TaskIdentity, str], Awaitable[bytes | None]]


def fitted(width: int, height: int) -> tuple[int, int]:
    """The largest size within both bounds, keeping the aspect ratio."""
    scale = min(1.0, MAX_SIDE / max(width, height), (MAX_PIXELS / (width * height)) ** 0.5)
    return max(1, int(width * scale)), max(1, int(height * scale))


def fit_png(data: bytes) -> bytes:
    """The PNG itself when it fits, else a scaled-down PNG."""
    size = png_size(data)
    if size is None or fitted(*size) == size:
        return data
    with Image.open(io.BytesIO(data)) as picture:
        scaled = picture.resize(fitted(*size), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        scaled.save(out, format="PNG", optimize=True)
        return out.getvalue()


def image_artifact(output: Any) -> str | None:
    """The id of the image artifact a tool's output names, if it names one."""
    artifact = output.get("artifact") if isinstance(output, dict) else None
    if not isinstance(artifact, dict):
        return None
    media_type = artifact.get("media_type")
    artifact_id = artifact.get("artifact_id")
    if media_type == "image/png" and isinstance(artifact_id, str):
        return artifact_id
    return None


async def image_block(
    result: ToolResult, identity: TaskIdentity, read: ImageReader
) -> types.ImageContent | None:
    artifact_id = image_artifact(result.output) if result.ok else None
    if artifact_id is None:
        return None
    data = await read(identity, artifact_id)
    if data is None or png_size(data) is None:
        return None
    return types.ImageContent(
        data=base64.b64encode(fit_png(data)).decode("ascii"), mime_type="image/png"
    )
