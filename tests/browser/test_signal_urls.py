"""The URLs the task's network signals show the agent keep no credential the page put in
them: no user info, no query value, no query item that is a value on its own."""

from __future__ import annotations

import pytest

from gateway.browser.signals import _bare_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://ada:hunter2@app.example:8080/p?a=1", "http://app.example:8080/p?a=…"),
        ("https://app.example/cb?sk_live_abc123", "https://app.example/cb?…"),
        ("http://[::1]:9/x?code=s3cr3t&state=x", "http://[::1]:9/x?code=…&state=…"),
        ("https://app.example/", "https://app.example/"),
    ],
)
def test_a_url_shows_no_credential(url: str, shown: str) -> None:
    assert _bare_url(url) == shown
