"""`gateway serve` says where the console is, beside where it serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gateway import cli


def test_serve_prints_the_consoles_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Any] = []
    # The server itself is not started: what is printed before it is the point.
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(options))
    monkeypatch.setenv("GATEWAY_DATA_DIR", str(tmp_path / "data"))
    assert cli.main(["serve", "--no-example", "--host", "127.0.0.1", "--port", "8123"]) == 0
    printed = capsys.readouterr().out
    assert "gateway: the operator console is at http://127.0.0.1:8123/console" in printed
    assert served and served[0]["port"] == 8123
