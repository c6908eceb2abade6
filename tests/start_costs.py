"""What every test gateway, server and HTTP client pays to start or stop, paid once per
test run (or not at all) instead of every time.

A test run starts hundreds of gateways and servers and more HTTP clients, the same way:

- Each httpx (and httpx2) client builds a verifying TLS context and loads the CA bundle
  into it, even one that only ever speaks plain HTTP on loopback. The context is the same
  every time, so one is built per run and handed to every client that asks for the
  default (a client given a context or a CA file of its own still gets that).
- Each gateway's store brings its new, empty SQLite file to the schema's head by running
  every migration, and ends up with the same file every time. So the migrations run once
  per run into a file of their own, and each new empty database file starts as a copy of
  it; the real `upgrade` still runs on the copy (and finds it at head), and the answer is
  the one migrating the empty file gives. Any other database (not empty, not SQLite, or
  asked for another revision) is migrated as it always is.
- Each in-process server (`gateway.serving.serving`: every test gateway, the test sites)
  took 0.15 s or more to stop, asleep: uvicorn looks for its exit flag every 0.1 s and,
  once it is up, waits 0.1 s before it looks at the connections left, every 0.1 s again.
  Those are all polls; here they poll every 0.02 s (uvicorn's once-a-second work, the
  date header, follows at ten of its ticks, so every 0.2 s). A server still ends only
  once its connections and tasks are done.

Gateways started as processes of their own (the CLI, cluster and fault tests) do not go
through this: they migrate their own files, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx._transports.default as httpx_transport
import httpx2._transports.default as httpx2_transport
import pytest
import uvicorn.server

from gateway.core.store import migrate
from gateway.core.store.sqlite import database_path

__all__ = ["once_per_run"]


def _shared_default_context(build: Callable[..., ssl.SSLContext]) -> Callable[..., ssl.SSLContext]:
    """`build` (a `create_ssl_context`), with its default context built once per setting
    of the variables it reads."""
    built: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
    lock = threading.Lock()

    def create_ssl_context(
        verify: Any = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if verify is not True or cert is not None or not trust_env:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with lock:
            if key not in built:
                built[key] = build(verify=verify, cert=cert, trust_env=trust_env)
            return built[key]

    return create_ssl_context


def _seeded_upgrade(
    upgrade: Callable[..., tuple[str | None, str]],
) -> Callable[..., tuple[str | None, str]]:
    """`upgrade`, starting an existing, empty SQLite file as a copy of one it migrated."""
    template: list[bytes] = []
    lock = threading.Lock()

    def migrated_empty_file() -> bytes:
        if not template:
            with tempfile.TemporaryDirectory(prefix="gateway-schema-") as folder:
                path = Path(folder) / "gateway.db"
                path.touch()
                upgrade(f"sqlite:///{path}")
                template.append(path.read_bytes())
        return template[0]

    def seeded(url: str, revision: str = "head") -> tuple[str | None, str]:
        database = database_path(url)
        if revision != "head" or database is None:
            return upgrade(url, revision)
        path = Path(database)
        with lock:
            seeding = path.is_file() and path.stat().st_size == 0
            if seeding:
                # Written into the file that is there: it keeps its owner and mode.
                with path.open("r+b") as file:
                    file.write(migrated_empty_file())
        before, after = upgrade(url, revision)
        return (None, after) if seeding else (before, after)

    return seeded


UVICORN_POLL_S = 0.02


class _ShortPolls(types.ModuleType):
    """asyncio as uvicorn's server module sees it: the same, but for shorter sleeps (every
    sleep there is the interval of a poll)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(min(delay, UVICORN_POLL_S), result)


@contextlib.contextmanager
def _patched() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for module in (httpx_transport, httpx2_transport):
            patch.setattr(
                module, "create_ssl_context", _shared_default_context(module.create_ssl_context)
            )
        patch.setattr(migrate, "upgrade", _seeded_upgrade(migrate.upgrade))
        patch.setattr(uvicorn.server, "asyncio", _ShortPolls("asyncio"))
        yield


_active = threading.Event()


@pytest.fixture(scope="session", autouse=True)
def once_per_run() -> Iterator[None]:
    """Active for the whole run. The suites of tests/ and e2e/ each name it in their
    conftest; in a run of both it is put in place once."""
    if _active.is_set():
        yield
        return
    _active.set()
    try:
        with _patched():
            yield
    finally:
        _active.clear()
