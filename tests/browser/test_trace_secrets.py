"""The task browser's trace, read as an attacker with the artifact would: no secret the
evidence redacts (a password typed into a password field, a value typed as secret, a
password the page itself held) is anywhere in the trace.zip, in any form."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from urllib.parse import quote_plus

import pytest

from gateway.browser import BrowserProcesses
from tests.browser.conftest import Sites, browser_gateway, snapshot_ref

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

TYPED_PASSWORD = "hunter2-correct-horse"
TYPED_SECRET = "visible-secret-4242"
KEY_BY_KEY = "typed-one-key-at-a-time"
PRESET = "preset-pw-123"  # the page's own value of its "Kept" password field


def _everything(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return b"\n".join(archive.read(name) for name in archive.namelist())


async def test_the_trace_artifact_holds_no_secret_the_evidence_redacts(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> None:
    async with browser_gateway(tmp_path, sites, task_chromium, browser_trace=True) as b:
        task = await b.task()
        nav = await b.call(task, "browser.navigate", url="/login")
        snap = nav.output["snapshot"]
        password = snapshot_ref(snap, 'textbox "Password"')
        user, code = snapshot_ref(snap, 'textbox "User"'), snapshot_ref(snap, 'textbox "Code"')
        assert (await b.call(task, "browser.fill", ref=password, value=TYPED_PASSWORD)).ok
        assert (await b.call(task, "browser.fill", ref=user, value=TYPED_SECRET, secret=True)).ok
        assert (await b.call(task, "browser.type", ref=code, text=KEY_BY_KEY)).ok
        shown = (await b.call(task, "browser.snapshot")).output["snapshot"]
        for value in (TYPED_PASSWORD, TYPED_SECRET, KEY_BY_KEY, PRESET):
            assert value not in shown
        calls = await b.evidence(task, "call")
        assert json.dumps(calls).count("[secret: ") >= 3
        await b.gw.tasks.end(task.task_id)
        closed = (await b.evidence(task, "browser_closed"))[0]
        ref = await b.gw.store.get_artifact(closed["data"]["trace"]["artifact_id"])
        trace = _everything(await b.gw.store.read_artifact(ref))
        assert b"context-options" in trace and b"/login" in trace  # a trace of the page
        for value in (TYPED_PASSWORD, TYPED_SECRET, KEY_BY_KEY, PRESET):
            for form in (value, json.dumps(value), quote_plus(value)):
                assert form.encode() not in trace, (value, form)
