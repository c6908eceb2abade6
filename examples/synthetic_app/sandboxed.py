"""The example app as a task's sandbox runs it: `python -m examples.synthetic_app.sandboxed`.

One instance of the app (the "sandbox" instance: no assistant, no control plane), serving
HTTP on the listening unix socket the gateway hands it (`SANDBOX_LISTEN_FD`), with its
records and its cookie key in the sandbox's private data folder (`SANDBOX_DATA`). It reads
nothing else of its environment but `SYNTHETIC_STEP_S`, the simulated evaluation's pace.
The gateway registers it as the repository `synthetic-app` (examples/synthetic_app/serve.py).
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import uvicorn

from examples.synthetic_app.web import AppConfig, SyntheticApp
from gateway.serving import SERVER_OPTIONS


def _secret(path: Path) -> str:
    if path.exists() and path.read_text().strip():
        return path.read_text().strip()
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def main() -> None:
    data = Path(os.environ.get("SANDBOX_DATA", "."))
    app = SyntheticApp(
        AppConfig(
            "sandbox",
            data / "sandbox.db",
            _secret(data / "sandbox.key"),
            step_s=float(os.environ.get("SYNTHETIC_STEP_S", "0.4")),
        )
    )
    listener = socket.socket(fileno=int(os.environ["SANDBOX_LISTEN_FD"]))
    server = uvicorn.Server(uvicorn.Config(app.asgi(), log_level="warning", **SERVER_OPTIONS))
    server.run(sockets=[listener])


if __name__ == "__main__":
    main()
