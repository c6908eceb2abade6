"""The browser's origin policy and snapshot refs, without a browser."""

from __future__ import annotations

import pytest
from playwright.async_api import Error as PlaywrightError

from gateway.browser.acting import snapshot_after_load
from gateway.browser.policy import is_browser_service, page_url_allowed, resolve_target
from gateway.browser.snapshot import Refs, build_snapshot, compact, resolve_ref
from gateway.core.errors import ToolFailure
from gateway.core.identity import Sandbox

SANDBOX = Sandbox(
    id="sb", app_origin="http://127.0.0.1:8001", allowed_origins=("https://cdn.example",)
)


def test_paths_resolve_against_the_app_origin() -> None:
    assert resolve_target("/agents?x=1", SANDBOX) == "http://127.0.0.1:8001/agents?x=1"
    assert resolve_target("https://cdn.example/a", SANDBOX) == "https://cdn.example/a"


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        " JavaScript:alert(1)",
        "data:text/html,x",
        "blob:http://127.0.0.1:8001/uuid",
        "file:///etc/passwd",
        "//evil.example/x",
        "http://evil.example/",
        "http://127.0.0.1:8002/",
        "https://127.0.0.1:8001/",
        "http://127.0.0.1:8001\\@evil.example/",
        "http://127.0.0.1:8001@evil.example/",
        "http://2130706433:8001/",
        "http://127.0.0.1:8001/\nx",
        "agents",
        "",
        "http://[::1",
    ],
)
def test_everything_else_is_origin_blocked(url: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        resolve_target(url, SANDBOX)
    assert caught.value.code == "origin_blocked"


def test_page_urls() -> None:
    origins = SANDBOX.origins
    assert page_url_allowed("about:blank", origins)
    assert page_url_allowed("http://127.0.0.1:8001/x#y", origins)
    assert not page_url_allowed("about:srcdoc", origins)
    assert not page_url_allowed("chrome-error://chromewebdata/", origins)
    assert not page_url_allowed("blob:http://127.0.0.1:8001/u", origins)
    assert not page_url_allowed("http://127.0.0.1:8002/", origins)
    assert not page_url_allowed("http://[::1", origins)


RAW = '- heading "A" [ref=e1]\n- button "Go" [ref=e2]\n- link "L" [ref=e3]'


def test_refs_name_an_element_of_the_current_document_only() -> None:
    known = Refs()
    snap = build_snapshot(RAW, seq=4, document=2, max_chars=10_000)
    assert "[ref=s4.e2]" in snap.text
    with pytest.raises(ToolFailure) as caught:
        resolve_ref("s4.e2", known, 2)  # no snapshot yet
    assert caught.value.code == "stale_target"
    known.learn(snap)
    assert resolve_ref("s4.e2", known, 2) == "e2"
    # A later snapshot of the same document keeps the refs of what is still there valid.
    later = build_snapshot(RAW, seq=5, document=2, max_chars=10_000)
    known.learn(later)
    assert resolve_ref("s4.e2", known, 2) == resolve_ref("s5.e2", known, 2) == "e2"
    for ref, document in (("s3.e2", 2), ("s4.e2", 3), ("s4.e9", 2)):
        with pytest.raises(ToolFailure) as caught:
            resolve_ref(ref, known, document)
        assert caught.value.code == "stale_target", ref
    # A new document: nothing of the old one resolves, even a name it reuses.
    known.learn(build_snapshot(RAW, seq=6, document=3, max_chars=10_000))
    with pytest.raises(ToolFailure):
        resolve_ref("s5.e2", known, 3)
    assert resolve_ref("s6.e2", known, 3) == "e2"
    with pytest.raises(ToolFailure) as caught:
        resolve_ref("e2", known, 3)
    assert caught.value.code == "invalid_input"


def test_an_element_gone_from_a_full_snapshot_is_stale_but_a_scoped_one_adds() -> None:
    known = Refs()
    known.learn(build_snapshot(RAW, seq=1, document=0, max_chars=10_000))
    gone = RAW.replace(" [ref=e2]", "")
    known.learn(build_snapshot(gone, seq=2, document=0, max_chars=10_000))
    with pytest.raises(ToolFailure):
        resolve_ref("s1.e2", known, 0)
    scoped = build_snapshot(
        '- button "Later" [ref=e7]', seq=3, document=0, max_chars=99, full=False
    )
    known.learn(scoped)
    assert resolve_ref("s3.e7", known, 0) == "e7"
    assert resolve_ref("s2.e1", known, 0) == "e1"  # the scoped one did not take it away


class _SnapshotFails:
    """A session whose page cannot be read: the layer above is what is under test."""

    async def take_snapshot(self, _page: object, *, timeout_ms: float) -> object:
        assert timeout_ms <= 15_000  # inside the tool's deadline, after a 45 s navigation
        raise PlaywrightError("Timeout 10000ms exceeded.\nCall log: ...")


async def test_a_navigate_whose_snapshot_fails_still_reports_the_navigation() -> None:
    fields = await snapshot_after_load(_SnapshotFails(), object())  # type: ignore[arg-type]
    assert fields == {
        "snapshot_id": None,
        "snapshot": None,
        "snapshot_error": "Timeout 10000ms exceeded.",
    }


def test_chromiums_service_hosts_are_told_from_others() -> None:
    assert is_browser_service("content-autofill.googleapis.com:443")
    assert is_browser_service("http://update.googleapis.com/service/update2")
    assert is_browser_service("clients2.google.com:443")
    for other in ("googleapis.com.evil.example:443", "evilgoogle.com:443", "127.0.0.1:80"):
        assert not is_browser_service(other), other


TABLE = """- generic [active] [ref=e1]:
  - heading "Agents" [level=1] [ref=e2]
  - generic [ref=e3]:
    - generic [ref=e4]
    - table [ref=e5]:
      - rowgroup [ref=e6]:
        - row [ref=e7]:
          - columnheader "Agent" [ref=e8]
          - columnheader "Suite" [ref=e9]
      - rowgroup [ref=e11]:
        - row [ref=e12]:
          - rowheader "Agent 0" [ref=e13]:
            - link "Agent 0" [ref=e14] [cursor=pointer]:
              - /url: /agents/0
          - cell "eval-0" [ref=e15]
        - row [ref=e17]:
          - cell "note" [ref=e18]:
            - button "Open" [ref=e19] [cursor=pointer]
          - cell "x" [ref=e20]"""


def test_compact_keeps_what_an_agent_acts_on_and_folds_the_rest() -> None:
    # The page's root box holding only the focus, and layout boxes (a `div` with no name,
    # ref or text), go: their children take their place.
    assert compact(TABLE).splitlines() == [
        '- heading "Agents" [level=1] [ref=e2]',
        "- table [ref=e5]:",
        '  - rowgroup > row: columnheader "Agent" | columnheader "Suite"',
        "  - rowgroup:",
        # A header cell whose only child has its name says it once.
        '    - row: rowheader > link "Agent 0" [ref=e14] -> /agents/0 | cell "eval-0"',
        # A cell with a child of its own (of another name) keeps the row as it is.
        "    - row:",
        '      - cell "note":',
        '        - button "Open" [ref=e19]',
        '      - cell "x"',
    ]
    snap = build_snapshot(TABLE, seq=1, document=0, max_chars=10_000)
    # Only the refs it shows are handed out.
    assert snap.refs == {"e2", "e5", "e14", "e19"}
