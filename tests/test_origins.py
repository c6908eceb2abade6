"""Origin normalization: look-alikes and odd spellings never match an allowed origin."""

from __future__ import annotations

import pytest

from gateway.core.origins import OriginError, is_allowed, normalize_origin, origin_of

ALLOWED = frozenset({"http://127.0.0.1:8001", "https://app.example.test"})


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("HTTP://App.Example.TEST:443", "http://app.example.test:443"),
        ("https://app.example.test:443/", "https://app.example.test"),
        ("http://127.0.0.1:80", "http://127.0.0.1"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://app.example.test.", "http://app.example.test"),
    ],
)
def test_normal_forms(raw: str, normal: str) -> None:
    assert normalize_origin(raw) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "javascript:alert(1)",
        "data:text/html,hi",
        "file:///etc/passwd",
        "ftp://example.test",
        "http://user@127.0.0.1:8001",
        "http://127.0.0.1:8001@evil.test",
        "http://2130706433",
        "http://0x7f.0.0.1",
        "http://0x7f.1",
        "http://017.0.0.1",
        "http://127.1",
        "http://аpp.example.test",  # Cyrillic a
        "http://app.example.test/path",
        "http://app.example.test?q=1",
        "http://",
        "http://host:99999",
        "http://host:-1",
        "http://exa mple.test",
    ],
)
def test_odd_spellings_are_refused(raw: str) -> None:
    with pytest.raises(OriginError):
        normalize_origin(raw)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8001/agents?x=1", True),
        ("https://app.example.test/a#b", True),
        ("http://127.0.0.1:8002/", False),
        ("http://localhost:8001/", False),
        ("https://app.example.test.evil.test/", False),
        ("http://app.example.test/", False),  # scheme differs
        ("http://127.0.0.1:8001@evil.test/", False),
        ("javascript:location='http://127.0.0.1:8001'", False),
        ("//127.0.0.1:8001/", False),
        ("http://xn--pp-8cd.example.test/", False),
    ],
)
def test_is_allowed(url: str, allowed: bool) -> None:
    assert is_allowed(url, ALLOWED) is allowed


def test_origin_of_keeps_idna_hosts_distinct() -> None:
    assert origin_of("https://xn--bcher-kva.test/x") == "https://xn--bcher-kva.test"
