"""`gateway serve` and the example dashboard: a passwordless admin sign-in that holds the
control key is served only when asked, and asked beyond loopback it starts with a warning."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.cli import example_warning, parser, serve_settings
from gateway.serving import free_port
from gateway.settings import Settings

HOST = "127.0.0.1"


def settings_for(*argv: str) -> Settings:
    return serve_settings(parser().parse_args(["serve", *argv]))


def test_the_example_is_served_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_EXAMPLE", raising=False)
    assert settings_for().example is False
    assert settings_for("--example").example is True
    assert settings_for("--no-example").example is False  # still accepted
    monkeypatch.setenv("GATEWAY_EXAMPLE", "true")
    assert settings_for().example is True
    assert settings_for("--no-example").example is False
    with pytest.raises(SystemExit):
        settings_for("--example", "--no-example")


def test_the_example_beyond_loopback_is_warned_of() -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        assert example_warning(Settings(host=host, example=True)) is None
    for host in ("0.0.0.0", "192.0.2.7", "gateway.internal"):
        warning = example_warning(Settings(host=host, example=True))
        assert warning is not None and "no password" in warning and host in warning


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((HOST, port)) == 0


def _serve(
    tmp_path: Path, *argv: str, example_port: int | None = None
) -> tuple[subprocess.Popen[bytes], int, int]:
    port, example_port = free_port(HOST), example_port or free_port(HOST)
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "GATEWAY_EXAMPLE_PORT": str(example_port),
        "GATEWAY_EXAMPLE_SANDBOXES": "false",
        "GATEWAY_BROWSER_LAUNCH_AT_START": "false",
    }
    env.pop("GATEWAY_EXAMPLE", None)
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return process, port, example_port


def _wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://{HOST}:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gateway serve did not answer in time:\n{log.read_text()}")


@pytest.mark.parametrize("asked", [False, True])
def test_gateway_serve_starts_the_example_dashboard_only_with_example(
    tmp_path: Path, asked: bool
) -> None:
    process, port, example_port = _serve(tmp_path, *(["--example"] if asked else []))
    try:
        _wait_healthy(process, port, tmp_path / "serve.log")
        if asked:
            # The dashboard starts beside the gateway (its port may take connections a
            # moment before it answers them); it sends a visitor to sign in.
            deadline = time.monotonic() + 30
            page = None
            while page is None and time.monotonic() < deadline:
                try:
                    page = httpx.get(
                        f"http://{HOST}:{example_port}/", timeout=10, follow_redirects=True
                    )
                except httpx.TransportError:
                    time.sleep(0.1)
            assert page is not None, (tmp_path / "serve.log").read_text()
            assert page.status_code == 200 and "sign" in page.text.lower()
        else:
            assert not _listening(example_port)
            assert "example: dashboard" not in (tmp_path / "serve.log").read_text()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_gateway_serve_names_the_example_port_it_cannot_listen_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, free_port(HOST)))
        taken.listen()
        example_port = taken.getsockname()[1]
        process, _, _ = _serve(tmp_path, "--example", example_port=example_port)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    log = (tmp_path / "serve.log").read_text()
    assert process.returncode != 0, log
    assert f"cannot listen on {HOST}:{example_port} for the example dashboard" in log, log
