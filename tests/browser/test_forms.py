"""The tools that put values into a page, on real Chromium: select_option, fill_form, type,
upload from the task's workspace, hover, drag, and the `unsupported` answer (with the tool
to use instead) where a target cannot take an action."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gateway.browser import BrowserProcesses
from gateway.core.identity import TaskIdentity
from gateway.core.results import ToolStatus
from gateway.workspace import tools as workspace_tools
from gateway.workspace.paths import workspace_dir
from tests.browser.conftest import BrowserGateway, Sites, browser_gateway, snapshot_ref

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def gateway(
    tmp_path: Path, sites: Sites, task_chromium: BrowserProcesses
) -> AsyncIterator[BrowserGateway]:
    """A gateway with workspaces, so a task has files to upload."""
    async with browser_gateway(tmp_path, sites, task_chromium, browser_upload_max_bytes=4096) as b:
        workspace_tools.install(b.gw)
        yield b


async def _controls(b: BrowserGateway) -> tuple[TaskIdentity, str]:
    task = await b.task(scopes=["browser", "workspace:read", "workspace:write"])
    nav = await b.call(task, "browser.navigate", url="/controls")
    assert nav.ok, nav
    return task, nav.output["snapshot"]


async def _report(b: BrowserGateway, task: TaskIdentity) -> str:
    snap = (await b.call(task, "browser.snapshot")).output["snapshot"]
    assert (await b.call(task, "browser.click", ref=snapshot_ref(snap, "Report"))).ok
    waited = await b.call(task, "browser.wait_for", text="color=", timeout_ms=5000)
    assert waited.ok, waited
    out = (await b.call(task, "browser.snapshot", role="paragraph")).output["snapshot"]
    return str(out)


async def test_fill_on_a_file_input_or_a_select_is_unsupported_with_the_tool_to_use(
    gateway: BrowserGateway,
) -> None:
    task, snap = await _controls(gateway)
    on_file = await gateway.call(
        task, "browser.fill", ref=snapshot_ref(snap, 'button "Attachment"'), value="x"
    )
    assert on_file.status is ToolStatus.FAILED and on_file.error is not None
    assert on_file.error.code == "unsupported"
    assert "browser.upload" in on_file.error.message and "Locator" not in on_file.error.message
    on_select = await gateway.call(
        task, "browser.fill", ref=snapshot_ref(snap, 'combobox "Color"'), value="Red"
    )
    assert on_select.error is not None and on_select.error.code == "unsupported"
    assert "browser.select_option" in on_select.error.message
    on_text = await gateway.call(
        task, "browser.select_option", ref=snapshot_ref(snap, 'textbox "Title"'), options=["a"]
    )
    assert on_text.error is not None and on_text.error.code == "unsupported"


async def test_select_option_by_label_or_value_and_several_in_a_multiple_select(
    gateway: BrowserGateway,
) -> None:
    task, snap = await _controls(gateway)
    color, tags = snapshot_ref(snap, 'combobox "Color"'), snapshot_ref(snap, 'listbox "Tags"')
    chosen = await gateway.call(task, "browser.select_option", ref=color, options=["Green"])
    assert chosen.ok, chosen
    assert (
        await gateway.call(task, "browser.select_option", ref=tags, options=["alpha", "gamma"])
    ).ok
    assert "color=g tags=alpha,gamma" in await _report(gateway, task)
    by_value = await gateway.call(task, "browser.select_option", ref=color, options=["b"])
    assert by_value.ok
    assert "color=b" in await _report(gateway, task)
    missing = await gateway.call(task, "browser.select_option", ref=color, options=["Purple"])
    assert missing.error is not None and missing.error.code == "invalid_input"
    assert "'Red'" in missing.error.message  # the options it has
    two = await gateway.call(task, "browser.select_option", ref=color, options=["Red", "Blue"])
    assert two.error is not None and two.error.code == "invalid_input"


async def test_fill_form_type_hover_and_drag(gateway: BrowserGateway) -> None:
    task, snap = await _controls(gateway)
    filled = await gateway.call(
        task,
        "browser.fill_form",
        fields=[
            {"ref": snapshot_ref(snap, 'textbox "Title"'), "value": "Q3"},
            {"ref": snapshot_ref(snap, 'combobox "Color"'), "value": "Blue"},
            {"ref": snapshot_ref(snap, 'listbox "Tags"'), "value": ["beta"]},
            {"ref": snapshot_ref(snap, 'checkbox "Agree"'), "value": True},
        ],
    )
    assert filled.ok, filled
    typed = await gateway.call(
        task, "browser.type", ref=snapshot_ref(snap, 'textbox "Keys"'), text="hello"
    )
    assert typed.ok and typed.output["typed"] == 5
    report = await _report(gateway, task)
    assert "color=b tags=beta agree=true title=Q3 keys=5" in report, report
    # The nameless clickable card keeps a ref (the pointer cursor says it takes a click).
    snap = (await gateway.call(task, "browser.snapshot")).output["snapshot"]
    card = next(line for line in snap.splitlines() if "Quarterly" in line)
    assert "[cursor=pointer]" in card and "[ref=" in card, snap
    clicked = await gateway.call(task, "browser.click", ref=snapshot_ref(snap, "Quarterly"))
    assert clicked.ok and "card opened" in clicked.output["changes"], clicked
    hovered = await gateway.call(task, "browser.hover", ref=snapshot_ref(snap, "Hover me"))
    assert hovered.ok, hovered
    assert "menu shown" in hovered.output["changes"]
    dragged = await gateway.call(
        task, "browser.drag", ref=snapshot_ref(snap, "Item A"), to_ref=snapshot_ref(snap, "Bin")
    )
    assert dragged.ok and "dropped a" in dragged.output["changes"], dragged


async def test_focus_shows_in_the_snapshot(gateway: BrowserGateway) -> None:
    task, snap = await _controls(gateway)
    title = snapshot_ref(snap, 'textbox "Title"')
    assert (await gateway.call(task, "browser.fill", ref=title, value="x")).ok
    snap = (await gateway.call(task, "browser.snapshot")).output["snapshot"]
    line = next(line for line in snap.splitlines() if 'textbox "Title"' in line)
    assert "[active]" in line, snap


async def test_upload_from_the_workspace_with_its_digest_in_evidence(
    gateway: BrowserGateway,
) -> None:
    task, snap = await _controls(gateway)
    for name, body in (("notes.txt", "first file"), ("b.csv", "a,b")):
        wrote = await gateway.call(task, "workspace.write", path=name, contents=body)
        assert wrote.ok, wrote
    one = await gateway.call(
        task, "browser.upload", ref=snapshot_ref(snap, 'button "Attachment"'), paths=["notes.txt"]
    )
    assert one.ok, one
    assert one.output["uploaded"][0]["sha256"] == hashlib.sha256(b"first file").hexdigest()
    assert (
        await gateway.call(
            task,
            "browser.upload",
            ref=snapshot_ref(snap, 'button "Many"'),
            paths=["notes.txt", "b.csv"],
        )
    ).ok
    # A styled button whose click opens the page's hidden file input.
    hidden = await gateway.call(
        task, "browser.upload", ref=snapshot_ref(snap, "Attach a file"), paths=["b.csv"]
    )
    assert hidden.ok, hidden
    report = await _report(gateway, task)
    assert "file=notes.txt:10:first file" in report
    assert "many=notes.txt:10:first file,b.csv:3:a,b" in report
    assert "hidden=b.csv:3:a,b" in report
    too_many = await gateway.call(
        task,
        "browser.upload",
        ref=snapshot_ref(snap, 'button "Attachment"'),
        paths=["notes.txt", "b.csv"],
    )
    assert too_many.error is not None and too_many.error.code == "unsupported"
    calls = [c for c in await gateway.evidence(task, "call") if c["tool"] == "browser.upload"]
    assert calls[0]["context"]["uploaded"] == [
        {"path": "notes.txt", "size": 10, "sha256": hashlib.sha256(b"first file").hexdigest()}
    ]


async def test_a_click_on_a_file_input_says_to_upload(gateway: BrowserGateway) -> None:
    task, snap = await _controls(gateway)
    clicked = await gateway.call(
        task, "browser.click", ref=snapshot_ref(snap, 'button "Attachment"')
    )
    assert clicked.error is not None and clicked.error.code == "unsupported", clicked
    assert "browser.upload" in clicked.error.message


async def test_upload_takes_no_path_outside_the_tasks_workspace(
    gateway: BrowserGateway, tmp_path: Path
) -> None:
    task, snap = await _controls(gateway)
    ref = snapshot_ref(snap, 'button "Attachment"')
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host secret")
    other = await gateway.task(org="org_other", scopes=["browser", "workspace:write"])
    assert (await gateway.call(other, "workspace.write", path="theirs.txt", contents="x")).ok
    theirs = workspace_dir(gateway.gw.settings.data_dir, other) / "theirs.txt"
    ws = workspace_dir(gateway.gw.settings.data_dir, task)
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "link.txt").symlink_to(outside)
    for path in (
        str(outside),
        "../../../../" + outside.name,
        "/etc/passwd",
        "~/.ssh/id_rsa",
        str(theirs),
        "link.txt",
    ):
        refused = await gateway.call(task, "browser.upload", ref=ref, paths=[path])
        assert refused.status is ToolStatus.DENIED, (path, refused)
        assert refused.error is not None and refused.error.code == "forbidden", (path, refused)
    missing = await gateway.call(task, "browser.upload", ref=ref, paths=["nothing-here.txt"])
    assert missing.error is not None and missing.error.code == "not_found"
    # Over the bound (4096 bytes here): refused before the page gets anything.
    assert (await gateway.call(task, "workspace.write", path="big.bin", contents="x" * 5000)).ok
    big = await gateway.call(task, "browser.upload", ref=ref, paths=["big.bin"])
    assert big.error is not None and big.error.code == "quota_exceeded", big
    assert "file=," in await _report(gateway, task) or "file= " in await _report(gateway, task)


async def test_upload_from_the_tasks_own_artifacts_with_their_digest_in_evidence(
    gateway: BrowserGateway,
) -> None:
    task, snap = await _controls(gateway)
    store = gateway.gw.store
    kept = await store.put_artifact(
        task, b"kept report", name="report.txt", media_type="text/plain"
    )
    assert (await gateway.call(task, "workspace.write", path="b.csv", contents="a,b")).ok
    both = await gateway.call(
        task,
        "browser.upload",
        ref=snapshot_ref(snap, 'button "Many"'),
        paths=["b.csv"],
        artifacts=[kept.id],
    )
    assert both.ok, both
    digest = hashlib.sha256(b"kept report").hexdigest()
    assert both.output["uploaded"][1] == {
        "artifact_id": kept.id,
        "name": "report.txt",
        "size": 11,
        "sha256": digest,
    }
    assert "many=b.csv:3:a,b,report.txt:11:kept report" in await _report(gateway, task)
    calls = [c for c in await gateway.evidence(task, "call") if c["tool"] == "browser.upload"]
    assert calls[0]["context"]["uploaded"][1]["sha256"] == digest


async def test_upload_takes_no_artifact_but_the_tasks_own_and_bounds_them(
    gateway: BrowserGateway,
) -> None:
    task, snap = await _controls(gateway)
    ref = snapshot_ref(snap, 'button "Attachment"')
    store = gateway.gw.store
    other_org = await gateway.task(org="org_other")
    same_org = await gateway.task()
    theirs = await store.put_artifact(other_org, b"theirs", name="t.txt", media_type="text/plain")
    sibling = await store.put_artifact(same_org, b"sibling", name="s.txt", media_type="text/plain")
    for artifact_id in (theirs.id, sibling.id, "art_" + "0" * 20):
        refused = await gateway.call(task, "browser.upload", ref=ref, artifacts=[artifact_id])
        assert refused.error is not None and refused.error.code == "not_found", refused
        assert "t.txt" not in refused.error.message and "s.txt" not in refused.error.message
    for bad in ("../../etc/passwd", "/tmp/x", "art_XYZ"):
        refused = await gateway.call(task, "browser.upload", ref=ref, artifacts=[bad])
        assert refused.error is not None and refused.error.code == "invalid_input", refused
    # Over the bound (4096 bytes here), by its recorded size: nothing reaches the page.
    big = await store.put_artifact(task, b"x" * 5000, name="big.bin", media_type="text/plain")
    over = await gateway.call(task, "browser.upload", ref=ref, artifacts=[big.id])
    assert over.error is not None and over.error.code == "quota_exceeded", over
    assert (await gateway.call(task, "workspace.write", path="a.txt", contents="y" * 3000)).ok
    half = await store.put_artifact(task, b"z" * 3000, name="half.bin", media_type="text/plain")
    together = await gateway.call(
        task,
        "browser.upload",
        ref=snapshot_ref(snap, 'button "Many"'),
        paths=["a.txt"],
        artifacts=[half.id],
    )
    assert together.error is not None and together.error.code == "quota_exceeded", together
    assert "file=," in await _report(gateway, task) or "file= " in await _report(gateway, task)
