"""The MCP conformance suite (`@modelcontextprotocol/conformance`, on Node 22 from the npm
registry) against the gateway's `/v1/mcp`, with an agent token injected by a proxy. Every
scenario not in `tests/clients/conformance-baseline.yml` must pass, and every one in it
must still fail: a scenario that passes today and fails later fails this test."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.serving import serving
from gateway.testing import LiveGateway
from tests.clients.bearer_proxy import BearerProxy
from tests.clients.npm import CONFORMANCE, HERE, NODE_22, ensure_installed

BASELINE = HERE / "conformance-baseline.yml"


@pytest.fixture(scope="module", autouse=True)
def _clients() -> None:
    ensure_installed()


async def test_the_conformance_suite_passes_all_but_its_baseline(
    live: LiveGateway, tmp_path: Path
) -> None:
    task = await live.create_task(scopes=["ui"])
    proxy = BearerProxy(live.base_url, task["tokens"]["agent"])
    try:
        async with serving(proxy) as front:
            suite = await asyncio.create_subprocess_exec(
                str(NODE_22),
                str(CONFORMANCE),
                "server",
                "--url",
                f"{front}/v1/mcp",
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(tmp_path / "results"),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await asyncio.wait_for(suite.communicate(), 600)
    finally:
        await proxy.aclose()
    report = out.decode(errors="replace")
    summary = report[report.find("=== SUMMARY ===") :]
    assert suite.returncode == 0, summary
    assert "Baseline check passed" in report, summary
