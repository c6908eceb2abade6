"""What a model reads from the MCP door: compact text, real newlines, and pictures that fit."""

from __future__ import annotations

import io

from PIL import Image

from gateway.core.png import png_size
from gateway.core.results import ToolError, ToolResult, ToolStatus
from gateway.mcp_door.images import MAX_PIXELS, MAX_SIDE, fit_png, image_artifact
from gateway.mcp_door.rendering import model_text, render

SNAPSHOT = '- heading "Home" [level=1] [ref=s1.e1]\n- button "Save \\"now\\"" [ref=s1.e2]'


def test_a_snapshot_reads_as_a_yaml_block_not_escaped_json() -> None:
    result = ToolResult(
        call_id="call_1",
        tool="browser.navigate",
        status=ToolStatus.SUCCEEDED,
        output={
            "url": "http://127.0.0.1:8001/",
            "status": 200,
            "snapshot_id": "s1",
            "snapshot": SNAPSHOT,
            "truncated": False,
        },
    )
    text = model_text(result)
    assert text.splitlines() == [
        "browser.navigate succeeded",
        "url: http://127.0.0.1:8001/",
        "status: 200",
        "snapshot_id: s1",
        "snapshot: |",
        '  - heading "Home" [level=1] [ref=s1.e1]',
        '  - button "Save \\"now\\"" [ref=s1.e2]',
        "truncated: false",
    ]
    rendered = render(result)
    assert rendered.structured_content == result.public()  # unchanged, for programs
    assert rendered.is_error is False


def test_a_failure_says_its_code_message_and_whether_to_retry() -> None:
    result = ToolResult(
        call_id="call_2",
        tool="browser.click",
        status=ToolStatus.UNAVAILABLE,
        error=ToolError(code="browser_unavailable", message="the browser is gone", retryable=True),
    )
    assert model_text(result) == (
        "browser.click unavailable\nerror: browser_unavailable: the browser is gone\nretryable: yes"
    )
    assert render(result).is_error is True


def test_an_overloaded_call_says_when_to_retry() -> None:
    error = ToolError(
        code="overloaded",
        message="the task browser is overloaded (2 actions running, 4 waiting for 2 slots)",
        retryable=True,
        details={"retry_after_s": 3},
    )
    result = ToolResult(
        call_id="call_3", tool="browser.snapshot", status=ToolStatus.UNAVAILABLE, error=error
    )
    assert model_text(result).splitlines() == [
        "browser.snapshot unavailable",
        f"error: overloaded: {error.message}",
        "retryable: yes; retry after 3 s",
    ]
    rendered = render(result)
    assert rendered.is_error is True
    # Programs read the hint where every door puts it.
    assert rendered.structured_content == result.public()
    assert result.public()["error"]["details"] == {"retry_after_s": 3}


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def test_a_large_screenshot_is_scaled_to_what_a_model_takes() -> None:
    for width, height in ((3000, 2000), (1280, 9000), (1500, 1000)):
        scaled = png_size(fit_png(_png(width, height)))
        assert scaled is not None
        w, h = scaled
        assert max(w, h) <= MAX_SIDE and w * h <= MAX_PIXELS, (width, height, scaled)
        assert abs(w / h - width / height) < 0.02
    small = _png(1280, 720)
    assert fit_png(small) == small  # within bounds: the very bytes


def test_only_a_png_artifact_is_an_image() -> None:
    png = {"artifact": {"artifact_id": "art_1", "media_type": "image/png"}}
    assert image_artifact(png) == "art_1"
    assert image_artifact({"artifact": {"artifact_id": "art_2", "media_type": "text/html"}}) is None
    assert image_artifact({"snapshot": "x"}) is None
