"""What the guard stopped, as a call's verdict reads it: which refusals deny the call, and
what the denial says; and the bounded wait for windows a page opened (no browser needed)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.browser import windows
from gateway.browser.guards import BlockedRequest
from gateway.browser.violations import Violation, denial, refused_kind
from gateway.core.results import ErrorCode, ToolStatus


def violation(kind: str, *, denies: bool) -> Violation:
    return Violation(kind=kind, target="http://elsewhere.test/" + "x" * 600, denies=denies, at=0)


def test_refusals_that_do_not_deny_leave_the_call_alone() -> None:
    assert denial([violation("request_refused", denies=False)], "http://app.test/") is None
    assert denial([], "http://app.test/") is None


def test_the_first_denying_refusal_names_the_denial_and_all_are_listed() -> None:
    pending = [
        violation("request_refused", denies=False),
        violation("navigation_blocked", denies=True),
        violation("popup_blocked", denies=True),
    ]
    failure = denial(pending, "http://app.test/" + "p" * 600)
    assert failure is not None
    assert failure.tool_status == ToolStatus.DENIED and failure.code == ErrorCode.ORIGIN_BLOCKED
    assert "(navigation_blocked: http://elsewhere.test/" in failure.message
    assert failure.details is not None
    assert [v["kind"] for v in failure.details["blocked"]] == [
        "request_refused",
        "navigation_blocked",
        "popup_blocked",
    ]
    assert all(len(v["target"]) == 512 for v in failure.details["blocked"])
    assert len(failure.details["page"]) == 512


@pytest.mark.parametrize(
    ("method", "navigation", "kind"),
    [
        ("GET", True, "navigation_refused"),
        ("GET", False, "request_refused"),
        ("CONNECT", False, "tunnel_refused"),
        ("CONNECT", True, "tunnel_refused"),
    ],
)
def test_a_refused_request_is_named_by_what_it_was(
    method: str, navigation: bool, kind: str
) -> None:
    request = BlockedRequest(
        target="elsewhere.test:443", method=method, navigation=navigation, at=0
    )
    assert refused_kind(request) == kind


def test_a_window_never_handed_over_is_waited_for_once_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(windows, "POPUP_REGISTER_S", 0.05)

    async def scenario() -> None:
        seen = windows.Windows()
        seen.opening(None)
        seen.opening(None)
        seen.handed_over_one()
        assert (seen.opened, seen.arrived) == (2, 1)
        # The second never comes: the wait is bounded, and the next call does not wait again.
        await seen.handed_over()
        assert seen.arrived == 2
        await asyncio.wait_for(seen.handed_over(), 0.01)

    asyncio.run(scenario())
