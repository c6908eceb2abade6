"""The gateway's Host policy and the MCP door's Origin rule, as a unit: exact names,
explicit ports, no look-alikes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.errors import Forbidden
from gateway.http.hosts import HostPolicy, split_host
from gateway.settings import Settings


def policy(tmp_path: Path, **kwargs: Any) -> HostPolicy:
    return HostPolicy.from_settings(
        Settings.model_validate({"data_dir": tmp_path, "example": False, **kwargs})
    )


def origin_ok(p: HostPolicy, origin: str | None) -> bool:
    try:
        p.check_origin(origin)
    except Forbidden:
        return False
    return True


def test_defaults_are_the_gateways_own_host_and_loopback(tmp_path: Path) -> None:
    p = policy(tmp_path, host="10.0.0.5", port=8000)
    for host in ("10.0.0.5:8000", "127.0.0.1:8000", "127.0.0.1:51234", "localhost:3", "[::1]:9"):
        assert p.host_allowed(host), host
    refused: tuple[str | None, ...] = (
        "10.0.0.5:8001",
        "10.0.0.5",
        "evil.example",
        "127.0.0.1:80.evil.example",
        "localhost.evil.example:80",
        "127.0.0.1:x",
        None,
        "",
    )
    for value in refused:
        assert not p.host_allowed(value), value


def test_public_url_behind_a_proxy(tmp_path: Path) -> None:
    p = policy(tmp_path, public_url="https://gateway.example.com")
    assert p.host_allowed("gateway.example.com")
    assert p.host_allowed("Gateway.Example.COM:443")
    assert not p.host_allowed("gateway.example.com:8443")
    assert origin_ok(p, "https://gateway.example.com")
    assert not origin_ok(p, "https://example.com")


@pytest.mark.parametrize("setting", ["allowed_hosts", "mcp_allowed_hosts"])
def test_configured_hosts_replace_the_defaults(tmp_path: Path, setting: str) -> None:
    p = policy(tmp_path, **{setting: "mcp.internal:*, gw.example.com"})
    assert p.host_allowed("mcp.internal:9000")
    assert p.host_allowed("gw.example.com")
    assert not p.host_allowed("gw.example.com:8080")
    assert not p.host_allowed("10.1.1.1:8000")
    # Loopback is not added back silently: the list is the whole answer.
    assert p.host_allowed("127.0.0.1:8000") is False


def test_wildcards_switch_checks_off_explicitly(tmp_path: Path) -> None:
    p = policy(tmp_path, mcp_allowed_hosts="*", mcp_allowed_origins="*")
    assert p.host_allowed("anything.example:1")
    assert origin_ok(p, "https://anything.example")


def test_configured_origins_are_normalized_and_headers_compared_exactly(
    tmp_path: Path,
) -> None:
    p = policy(tmp_path, mcp_allowed_origins="https://App.Example.com:443")
    assert origin_ok(p, None)
    assert origin_ok(p, "https://app.example.com")
    # A browser sends one serialized form; other spellings are other strings.
    for spelling in (
        "https://App.Example.com",
        "https://app.example.com:443",
        "https://app.example.com/",
        "https://app.example.com.",
        "https://app.example.com.evil.example",
        "null",
    ):
        assert not origin_ok(p, spelling), spelling


def test_bad_origin_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="GATEWAY_MCP_ALLOWED_ORIGINS"):
        policy(tmp_path, mcp_allowed_origins="javascript:alert(1)")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Example.com:8000", ("example.com", "8000")),
        ("example.com", ("example.com", None)),
        ("[::1]:8000", ("[::1]", "8000")),
        ("[::1]", ("[::1]", None)),
    ],
)
def test_split_host(value: str, expected: tuple[str, str | None]) -> None:
    assert split_host(value) == expected


def test_a_loopback_gateway_answers_loopback_pages_and_no_look_alike(tmp_path: Path) -> None:
    p = policy(tmp_path)  # host 127.0.0.1
    for origin in ("http://localhost:3000", "http://127.0.0.1:8765", "http://[::1]:9"):
        assert origin_ok(p, origin), origin
    for origin in (
        "http://localhost.evil.example",
        "http://127.0.0.1.evil.example:80",
        "https://localhost:3000",
        "http://LOCALHOST:3000",
        "http://localhost:03000",
    ):
        assert not origin_ok(p, origin), origin
    # Not for a gateway serving a network, nor once origins are named.
    assert not origin_ok(policy(tmp_path, host="10.0.0.5"), "http://localhost:3000")
    named = policy(tmp_path, mcp_allowed_origins="https://app.example.com")
    assert not origin_ok(named, "http://localhost:3000")
