"""Secrets a task's browser handles stay out of what the gateway keeps: a value typed into
a password field (or marked secret by the caller) is recorded as its length only, and no
snapshot shows a password field's value, to the agent or in evidence."""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import BrowserGateway

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

PASSWORD = "hunter2-Correct-Horse"
CODE = "918273"
NAME = "ada-lovelace"


def _ref(snapshot: str, label: str) -> str:
    for line in snapshot.splitlines():
        if f'"{label}"' in line and "[ref=" in line:
            return line.split("[ref=", 1)[1].split("]", 1)[0]
    raise AssertionError(f"no {label!r} in\n{snapshot}")


async def test_typed_passwords_are_kept_as_their_length_only(browsers: BrowserGateway) -> None:
    task = await browsers.task()
    page = await browsers.call(task, "browser.navigate", url="/login")
    assert page.ok, page
    snapshot = page.output["snapshot"]
    # A password field the page filled itself: its value is not shown either.
    assert "preset-pw-123" not in snapshot
    filled = {
        "User": (NAME, False),
        "Password": (PASSWORD, False),  # a password field
        "Code": (CODE, False),  # a one-time code field
    }
    for label, (value, secret) in filled.items():
        result = await browsers.call(
            task, "browser.fill", ref=_ref(snapshot, label), value=value, secret=secret
        )
        assert result.ok, result
    # The caller may mark any value secret.
    marked = await browsers.call(
        task, "browser.fill", ref=_ref(snapshot, "User"), value="token-by-caller", secret=True
    )
    assert marked.ok, marked

    after = await browsers.call(task, "browser.snapshot")
    assert after.ok
    assert PASSWORD not in after.output["snapshot"] and CODE not in after.output["snapshot"]
    assert "[secret]" in after.output["snapshot"]

    records = await browsers.gw.store.evidence_for(task.org_id, task.task_id)
    dump = json.dumps(records)
    for value in (PASSWORD, CODE, "token-by-caller", "preset-pw-123"):
        assert value not in dump, value
    fills = [r for r in records if r.get("tool") == "browser.fill"]
    kept = [f["input"]["value"] for f in fills]
    assert kept == [
        NAME,  # an ordinary field keeps what was typed
        f"[secret: {len(PASSWORD)} chars]",
        f"[secret: {len(CODE)} chars]",
        f"[secret: {len('token-by-caller')} chars]",
    ]
