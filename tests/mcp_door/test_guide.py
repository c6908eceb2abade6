"""The guide's agent example runs as written against a live gateway."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

from tests.mcp_door.conftest import DoorLive

GUIDE = Path(__file__).parents[2] / "docs" / "mcp.md"


def guide_example() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    return next(block for block in blocks if "streamable_http_client" in block)


async def run_example(door: DoorLive, tmp_path: Path, *args: str) -> str:
    script = tmp_path / "agent.py"
    script.write_text(guide_example())
    env = {
        **os.environ,
        "GATEWAY_URL": door.live.base_url,
        "GATEWAY_CONTROL_KEY": door.live.gateway.settings.control_key or "",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_the_guides_agent_lists_and_calls(door: DoorLive, tmp_path: Path) -> None:
    out = await run_example(door, tmp_path, "test.noop")
    lines = out.strip().splitlines()
    assert any(line.startswith("test_noop") for line in lines)
    status, _, body = lines[-1].partition(" ")
    assert status == "ok"
    assert json.loads(body)["output"] == {"ok": True}


async def test_the_guides_agent_sees_a_refusal_as_an_error(door: DoorLive, tmp_path: Path) -> None:
    # The example's task has the `member` role: the admin-only tool is neither listed nor
    # callable.
    out = await run_example(door, tmp_path, "test.admin")
    lines = out.strip().splitlines()
    assert not any(line.startswith("test.admin") for line in lines)
    status, _, body = lines[-1].partition(" ")
    assert status == "error"
    assert json.loads(body)["error"]["code"] == "forbidden"
