"""Settings from the environment, and generated keys that stay private."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import Settings


def test_environment_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GATEWAY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_SECRET_KEYS", "newest-aaaaaaaaaaaaaaaa, older-bbbbbbbbbbbbbbbb")
    monkeypatch.setenv("GATEWAY_DASHBOARD_ORIGINS", "http://127.0.0.1:8001,HTTPS://Dash.Test:443")
    monkeypatch.setenv("GATEWAY_MAX_CONTEXTS", "7")
    monkeypatch.setenv("GATEWAY_TAB_TOKEN_TTL_S", "60")
    s = Settings()
    assert s.secret_keys == ["newest-aaaaaaaaaaaaaaaa", "older-bbbbbbbbbbbbbbbb"]
    assert s.dashboard_origins == ["http://127.0.0.1:8001", "https://dash.test"]
    assert (s.max_contexts, s.tab_token_ttl_s, s.data_dir) == (7, 60, tmp_path)


def test_token_ttls_are_capped_at_an_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_AGENT_TOKEN_TTL_S", "7200")
    with pytest.raises(ValueError, match="agent_token_ttl_s"):
        Settings()


def test_bad_dashboard_origins_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_DASHBOARD_ORIGINS", "http://user@evil.test")
    with pytest.raises(ValueError, match="user info"):
        Settings()


def test_generated_keys_are_0600_and_stable(tmp_path: Path) -> None:
    first = Settings(data_dir=tmp_path)
    notes = first.ensure_secrets()
    for name in ("secret.key", "control.key"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o600, name
    assert first.control_key and first.control_key not in " ".join(notes)
    assert "control.key" in notes[0]
    second = Settings(data_dir=tmp_path)
    second.ensure_secrets()
    assert (second.secret_keys, second.control_key) == (first.secret_keys, first.control_key)


def test_keys_new_prints_a_fresh_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "new"]) == 0
    one = capsys.readouterr().out.strip()
    main(["keys", "new"])
    two = capsys.readouterr().out.strip()
    assert one != two and len(one) >= 40
