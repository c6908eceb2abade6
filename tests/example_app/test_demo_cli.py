"""`gateway demo` as a user runs it: a fresh process, a table of six checked operations,
a screenshot of the final report, exit status 0."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser


async def test_gateway_demo_runs_the_first_workflow(tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "demo",
        "--screenshot",
        str(shot),
        "--data-dir",
        str(tmp_path / "data"),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=110)
    text = output.decode()
    assert process.returncode == 0, text
    rows = [line for line in text.splitlines() if "  mcp  " in line]
    assert len(rows) == 6, text
    assert all("succeeded" in row for row in rows), text
    assert "queued" in rows[3]
    assert "1 provider setup error" in rows[4]
    assert "every operation reached its observable result" in text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
