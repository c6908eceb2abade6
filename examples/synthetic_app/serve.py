"""Running the example next to the gateway: one process, three origins.

- the gateway (`settings.port`, default 8000), with the example's product tools installed;
- the dashboard (`settings.example_port`, default 8001), where the user signs in; its
  backend is the control plane and its origin is allowed to open tab channels;
- each assistant task's own sandbox: the app at the repository's current commit, which the
  gateway provisions for the task (gateway/sandbox) and its browser reaches at an origin of
  its own; where the gateway cannot run sandboxes (not root, no bubblewrap, not a git
  checkout) or `GATEWAY_EXAMPLE_SANDBOXES=false`, one shared sandbox instance on the next
  port (default 8002) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from examples.synthetic_app.control import ControlPlane
from examples.synthetic_app.directory import DEMO_ADMIN, USERS
from examples.synthetic_app.tools import install_product_tools
from examples.synthetic_app.web import AppConfig, SyntheticApp
from gateway.app import Extension, build_app, build_gateway, default_extensions
from gateway.core.sandbox_spec import Repository
from gateway.runtime import Gateway
from gateway.sandbox.local import host_unready
from gateway.serving import SERVER_OPTIONS, QuietServer, listening_socket, serving
from gateway.settings import Settings

# The example app as the gateway's settings register it for sandboxes.
REPOSITORY = "synthetic-app"
SOURCE = Path(__file__).resolve().parents[2]


def example_repository(path: Path = SOURCE) -> Repository:
    return Repository(
        path=str(path),
        command=("{python}", "-m", "examples.synthetic_app.sandboxed"),
        health_path="/healthz",
        env=("SYNTHETIC_STEP_S",),
        ready_timeout_s=90,
    )


def current_commit(path: Path = SOURCE) -> str | None:
    """The commit checked out at `path`, if it is a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def sandboxes_unusable(settings: Settings, path: Path = SOURCE) -> str | None:
    """Why the example cannot give each task a sandbox of its own here; None if it can."""
    if not settings.example_sandboxes:
        return "GATEWAY_EXAMPLE_SANDBOXES is off"
    if settings.clustered and settings.sandbox_incus is None:
        return "a node of a cluster provisions sandboxes on Incus only (GATEWAY_SANDBOX_INCUS)"
    commit = current_commit(path)
    if commit is None:
        return f"{path} is not a git checkout"
    entry = "examples/synthetic_app/sandboxed.py"
    found = subprocess.run(
        ["git", "-C", str(path), "cat-file", "-e", f"{commit}:{entry}"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if found.returncode != 0:
        return f"commit {commit[:12]} has no {entry}"
    return None if settings.sandbox_incus is not None else host_unready()


def provision_for(
    settings: Settings, *, path: Path = SOURCE, commit: str | None = None, step_s: float = 0.4
) -> dict[str, Any]:
    """Register the example app in `settings` and return each task's `sandbox.provision`:
    the app at `commit` (the checkout's current one by default)."""
    settings.sandbox_repositories = {
        **settings.sandbox_repositories,
        REPOSITORY: example_repository(path),
    }
    chosen = commit or current_commit(path)
    assert chosen is not None, f"{path} is not a git checkout"
    return {
        # Incus where the gateway is given one, else sandboxes beside it.
        "provider": "incus" if settings.sandbox_incus is not None else "local",
        "repository": REPOSITORY,
        "commit": chosen,
        "env": {"SYNTHETIC_STEP_S": str(step_s)},
    }


@dataclass
class ExampleStack:
    gateway: Gateway
    gateway_app: Starlette
    dashboard: SyntheticApp
    # The shared sandbox instance, when tasks do not get sandboxes of their own.
    sandbox: SyntheticApp | None
    gateway_url: str
    dashboard_url: str
    sandbox_url: str | None


def gateway_extensions() -> list[Extension]:
    """The full gateway's extensions, with the tab channel the dashboard needs."""
    from gateway.tabs import install as install_tabs

    extensions = default_extensions()
    if install_tabs not in extensions:
        extensions.append(install_tabs)
    return extensions


def _secret(path: Path) -> str:
    """The app instance's cookie-signing key, kept across restarts (mode 0600)."""
    if path.exists() and path.read_text().strip():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    value = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def build_stack(
    settings: Settings,
    *,
    gateway_url: str,
    dashboard_url: str,
    sandbox_url: str | None = None,
    provision: dict[str, Any] | None = None,
    step_s: float = 0.4,
) -> ExampleStack:
    """Compose the gateway, the dashboard and, without `provision`, the shared sandbox
    instance at `sandbox_url` (nothing is started or served yet)."""
    settings.ensure_secrets()
    assert settings.control_key is not None
    origins = [dashboard_url]
    if "://127.0.0.1:" in dashboard_url:
        # The same dashboard opened as localhost is another origin; allow both spellings.
        origins.append(dashboard_url.replace("://127.0.0.1:", "://localhost:"))
    settings.dashboard_origins = list(dict.fromkeys([*settings.dashboard_origins, *origins]))
    home = settings.data_dir / "example"
    control = ControlPlane(
        gateway_url,
        settings.control_key,
        sandbox_origin=None if provision is not None else sandbox_url,
        provision=provision,
    )
    dashboard = SyntheticApp(
        AppConfig(
            "dashboard",
            home / "dashboard.db",
            _secret(home / "dashboard.key"),
            control=control,
            step_s=step_s,
        )
    )
    sandbox = (
        SyntheticApp(
            AppConfig("sandbox", home / "sandbox.db", _secret(home / "sandbox.key"), step_s=step_s)
        )
        if provision is None
        else None
    )
    gw = build_gateway(settings)
    install_product_tools(gw, dashboard)
    gateway_app = build_app(gateway=gw, extensions=gateway_extensions())
    return ExampleStack(
        gw, gateway_app, dashboard, sandbox, gateway_url, dashboard_url, sandbox_url
    )


@contextlib.asynccontextmanager
async def running_stack(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    step_s: float = 0.4,
    provision: dict[str, Any] | None = None,
) -> AsyncIterator[ExampleStack]:
    """Serve the gateway and the dashboard on free loopback ports until the block ends, and
    the shared sandbox instance unless each task's is provisioned (`provision_for`)."""
    # Each app needs the others' addresses before it is built, so the three sockets are
    # bound first and handed to the servers: nothing can take a port in between.
    async with contextlib.AsyncExitStack() as servers:
        # The shared sandbox's only when no task gets a sandbox of its own.
        sockets = [listening_socket(host) for _ in range(3 if provision is None else 2)]
        for sock in sockets:
            servers.callback(sock.close)
        urls = [f"http://{host}:{sock.getsockname()[1]}" for sock in sockets]
        stack = build_stack(
            settings,
            gateway_url=urls[0],
            dashboard_url=urls[1],
            sandbox_url=urls[2] if provision is None else None,
            provision=provision,
            step_s=step_s,
        )
        apps = [stack.gateway_app, stack.dashboard.asgi()]
        if stack.sandbox is not None:
            apps.append(stack.sandbox.asgi())
        for app, sock in zip(apps, sockets, strict=True):
            await servers.enter_async_context(serving(app, host=host, sock=sock))
        yield stack


def sign_in_help(dashboard_url: str) -> str:
    users = ", ".join(f"{u.id} ({u.role}, {u.org_id})" for u in USERS.values())
    return (
        f"example: dashboard on {dashboard_url}/ - sign in by picking a synthetic user "
        f"(no password): {users}; the demo admin is '{DEMO_ADMIN}'. "
        "Open the assistant panel on any page."
    )


async def serve_with_example(settings: Settings) -> None:
    """`gateway serve` with the example: the gateway in front, both instances beside it."""
    host = settings.host
    unusable = sandboxes_unusable(settings)
    # Every socket is bound before any app is built (each needs the others' addresses): a
    # port that is taken is reported now, by name, and none can be taken in between.
    with contextlib.ExitStack() as bound:
        gateway_sock = bound.enter_context(_listen(host, settings.port, "the gateway"))
        if not settings.port:  # its address, for the dashboard and the tasks' links
            settings.port = gateway_sock.getsockname()[1]
        dashboard_sock = bound.enter_context(
            _listen(host, settings.example_port, "the example dashboard (GATEWAY_EXAMPLE_PORT)")
        )
        dashboard_port = dashboard_sock.getsockname()[1]
        sandbox_sock = (
            bound.enter_context(
                _listen(
                    host,
                    dashboard_port + 1 if settings.example_port else 0,
                    "the shared sandbox instance (the port after the dashboard's)",
                )
            )
            if unusable is not None
            else None
        )
        stack = build_stack(
            settings,
            gateway_url=settings.base_url,
            dashboard_url=f"http://{host}:{dashboard_port}",
            sandbox_url=(
                f"http://{host}:{sandbox_sock.getsockname()[1]}" if sandbox_sock else None
            ),
            provision=provision_for(settings) if unusable is None else None,
        )
        apps = [(stack.gateway_app, gateway_sock), (stack.dashboard.asgi(), dashboard_sock)]
        if stack.sandbox is not None and sandbox_sock is not None:
            apps.append((stack.sandbox.asgi(), sandbox_sock))
        await _serve_all(stack, apps, unusable)


@contextlib.contextmanager
def _listen(host: str, port: int, what: str) -> Iterator[socket.socket]:
    try:
        sock = listening_socket(host, port)
    except (OSError, OverflowError) as error:
        message = f"gateway serve: cannot listen on {host}:{port} for {what}: {error}"
        raise SystemExit(message) from None
    with sock:
        yield sock


async def _serve_all(
    stack: ExampleStack, apps: list[tuple[Any, socket.socket]], unusable: str | None
) -> None:
    servers = [
        QuietServer(uvicorn.Config(app, log_level="info", **SERVER_OPTIONS)) for app, _ in apps
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on every platform
            loop.add_signal_handler(sig, stop.set)
    tasks = [
        asyncio.create_task(server.serve(sockets=[sock]))
        for server, (_, sock) in zip(servers, apps, strict=True)
    ]
    try:
        while not all(server.started for server in servers):
            if stop.is_set() or any(task.done() for task in tasks):
                break  # stopped early, or one failed to start
            await asyncio.sleep(0.05)
        else:
            print(sign_in_help(stack.dashboard_url), flush=True)
            control = stack.dashboard.control
            if control is not None and control.provision is not None:
                print(
                    "example: each assistant task gets a sandbox of its own: the app at "
                    f"commit {control.provision['commit'][:12]}, provisioned by the gateway",
                    flush=True,
                )
            else:
                print(
                    f"example: shared sandbox instance on {stack.sandbox_url}/ ({unusable})",
                    flush=True,
                )
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
    finally:
        # The instances first (their assistant tasks end on the still-running gateway).
        for server in reversed(servers):
            server.should_exit = True
            await asyncio.gather(tasks[servers.index(server)], return_exceptions=True)
    for task in tasks:
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            raise error


def run(settings: Settings) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_with_example(settings))
    return 0
