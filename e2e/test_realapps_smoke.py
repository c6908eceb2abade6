"""A few of the real-app suite's tasks on Django's admin, through the gateway's MCP door:
the agent finds what it needs by role and name in the gateway's answers, and each effect is
read back from the app's own database (the whole suite, against Playwright MCP too, is
`python -m bench.realapps`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.realapps import venv
from bench.realapps.suite import APPS, gateway_side

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SMOKE = ("sign in", "add a record", "filter a list", "edit via keyboard", "sign out")


@pytest.mark.timeout(300)
async def test_a_signed_in_admin_adds_filters_edits_and_signs_out(tmp_path: Path) -> None:
    (admin,) = [app for app in APPS if app.name == "django admin"]
    tasks = [t for t in admin.tasks if t.name in SMOKE]
    assert [t.name for t in tasks] == list(SMOKE)
    outcomes = await gateway_side(admin, tmp_path, venv.ensure(), tasks)
    failed = {name: o.error for name, o in outcomes.items() if not o.completed}
    assert not failed
