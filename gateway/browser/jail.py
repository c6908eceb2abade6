"""The gateway's side of the task browser's network jail (`netjail.py` is the browser's side).

A jailed Chromium lives in a network namespace whose only interface is its own loopback.
The one socket listening there (port `GUARD_PORT`, every loopback address) is handed to
this object over a unix socket, and served outside the jail: each task context's proxy
setting names a loopback address of its own (`http://127.x.y.z:4`), and a connection is
routed to the guard proxy of the context that owns the address it came to
(`jail_routes.py`). So the only destination a jailed browser can reach is a guard proxy;
the guard's own upstream connections are made from the gateway's network, where the
task's allowed origins are.

The guard proxies run in a process of their own (`guard_process.py`, the default), or,
with `guard_process` off, on the gateway's event loop; either way `guard` gives a context
its `ContextGuard`, and the rules are the same code.

The launcher script (`launcher`) is what Playwright is told to run as the browser. A
browser whose jail did not report here is never used (`registered`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import shlex
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import netjail
from .guard_process import GuardProcess, GuardUnavailable, OnBlock
from .guard_proxy import OriginProxy
from .guards import ContextGuard
from .jail_routes import GUARD_PORT, JailRoutes

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 10.0
DEFAULT_BROWSER_USER = "gateway-browser"
FALLBACK_BROWSER_USER = "nobody"


class JailUnavailable(RuntimeError):
    """The jail cannot be set up here (no namespaces, no browser user...)."""


def browser_user(name: str | None) -> tuple[int, int]:
    """The uid and gid a jailed browser runs as when the gateway is root."""
    for candidate in (name,) if name else (DEFAULT_BROWSER_USER, FALLBACK_BROWSER_USER):
        if candidate is None:
            continue
        if candidate.isdigit():
            return int(candidate), int(candidate)
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(candidate)
            if entry.pw_uid == 0:
                raise JailUnavailable(f"the browser user {candidate!r} is root")
            return entry.pw_uid, entry.pw_gid
    raise JailUnavailable(f"no browser user {name!r}: set GATEWAY_BROWSER_USER")


def network_namespace(pid: int | str) -> int | None:
    """The inode of a process's network namespace (`self` for this one), None if unknown."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


@dataclass
class BrowserJail:
    """Takes the guard sockets of jailed browsers as they report in, has them served (by
    the guard process, or here), and gives each context a guard at an address of its own."""

    user: str | None = None
    # The guard proxies in a process of their own (else on this event loop).
    guard_process: bool = False
    _dir: Path | None = None
    _control: socket.socket | None = None
    _accepting: asyncio.Task[None] | None = None
    _arrived: dict[int, asyncio.Event] = field(default_factory=dict)
    _jailed: set[int] = field(default_factory=set)  # browsers whose socket is served
    _addresses: set[str] = field(default_factory=set)  # given to a context, not yet back
    _next: int = 0
    _registering: set[asyncio.Future[None]] = field(default_factory=set)
    _routes: JailRoutes = field(default_factory=JailRoutes)  # served here
    _worker: GuardProcess | None = None  # or by the guard process

    async def start(self) -> None:
        if self._control is not None:
            return
        # A short private path: unix socket paths are limited to 107 bytes.
        self._dir = Path(tempfile.mkdtemp(prefix="gateway-jail-"))
        os.chmod(self._dir, 0o700)
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.bind(str(self._dir / "control.sock"))
        control.listen(64)
        control.setblocking(False)
        self._control = control
        if self.guard_process:
            worker = GuardProcess()
            try:
                await worker.start()
            except GuardUnavailable as exc:
                control.close()
                self._control = None
                raise JailUnavailable(str(exc)) from exc
            self._worker = worker
        self._accepting = asyncio.ensure_future(self._accept_forever(control))
        launcher = self._dir / "chromium"
        launcher.write_text(
            "#!/bin/sh\n"
            f'exec {shlex.quote(sys.executable)} -I -S {shlex.quote(netjail.__file__)} "$@"\n'
        )
        launcher.chmod(0o700)

    async def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._worker is not None:
            await self._worker.close()
            self._worker = None
        self._routes.close()
        self._jailed.clear()
        self._addresses.clear()
        if self._dir is not None:
            for name in ("control.sock", "chromium"):
                with contextlib.suppress(OSError):
                    (self._dir / name).unlink()
            with contextlib.suppress(OSError):
                self._dir.rmdir()
            self._dir = None

    @property
    def launcher(self) -> str:
        assert self._dir is not None, "the jail is not started"
        return str(self._dir / "chromium")

    def environment(self, browser: str) -> dict[str, str]:
        """What the launcher needs besides the caller's environment."""
        assert self._dir is not None, "the jail is not started"
        env = {
            netjail.CONTROL: str(self._dir / "control.sock"),
            netjail.BROWSER: browser,
            netjail.PORT: str(GUARD_PORT),
        }
        if os.geteuid() == 0:
            uid, gid = browser_user(self.user)
            env[netjail.USER] = f"{uid}:{gid}"
        return env

    # -- jails reporting in ---------------------------------------------------------------

    async def _accept_forever(self, control: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            link, _ = await loop.sock_accept(control)
            # Not a stream: the socket travels as ancillary data, which a stream would drop.
            task = asyncio.ensure_future(self._register(link))
            self._registering.add(task)
            task.add_done_callback(self._registering.discard)

    async def _register(self, link: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        with link:
            try:
                message, fds = await loop.run_in_executor(None, _receive_fds, link)
                pid = int(json.loads(message)["pid"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("a browser jail reported in badly: %r", exc)
                return
            guard = socket.socket(fileno=fds[0])
            for extra in fds[1:]:
                os.close(extra)
            if self._worker is not None:
                self._worker.serve_jail(pid, guard)
            else:
                await self._routes.serve(pid, guard)
            self._jailed.add(pid)
            self._arrived.setdefault(pid, asyncio.Event()).set()
            link.setblocking(False)
            with contextlib.suppress(OSError):
                await loop.sock_sendall(link, b"ok")

    async def registered(self, pid: int, timeout_s: float = REGISTER_TIMEOUT_S) -> bool:
        """Whether the browser process `pid` reported in from its jail (waits a little)."""
        event = self._arrived.setdefault(pid, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
        return pid in self._jailed

    def forget(self, pid: int) -> None:
        """The browser `pid` is gone: stop serving its socket."""
        self._arrived.pop(pid, None)
        self._jailed.discard(pid)
        if self._worker is not None:
            self._worker.forget_jail(pid)
        else:
            self._routes.forget(pid)

    @property
    def worker(self) -> GuardProcess | None:
        """The guard process, when the guards run in one."""
        return self._worker

    # -- guards ----------------------------------------------------------------------------

    def guard(self, on_block: OnBlock, pid: int | None) -> ContextGuard:
        """A fresh guard for one context of browser `pid` (None: of any jail, a remote
        browser's), at a loopback address of its own; it allows nothing until told."""
        address = self._allocate()
        if self._worker is not None:
            return self._worker.open(address, pid, on_block, self._addresses.discard)
        proxy = OriginProxy(on_block, on_close=lambda: self._addresses.discard(address))
        proxy.attach(self._routes, address, pid)
        return proxy

    def _allocate(self) -> str:
        for _ in range(1 << 24):
            self._next = (self._next % ((1 << 24) - 2)) + 1
            # 127.0.0.0/16 is left alone (127.0.0.1 is everyone's loopback).
            value = self._next + (1 << 16)
            address = f"127.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"
            if address not in self._addresses and not address.endswith((".0", ".255")):
                self._addresses.add(address)
                return address
        raise JailUnavailable("no free guard address")


async def open_guard(jail: BrowserJail | None, pid: int | None, on_block: OnBlock) -> ContextGuard:
    """The guard of a new context of browser `pid`: in `jail`, or, for a browser outside
    any jail, a proxy on a port of the gateway's loopback."""
    if jail is not None:
        return jail.guard(on_block, pid)
    proxy = OriginProxy(on_block)
    await proxy.start()
    return proxy


def _receive_fds(link: socket.socket) -> tuple[bytes, list[int]]:
    link.settimeout(REGISTER_TIMEOUT_S)
    message, fds, _flags, _address = socket.recv_fds(link, 1024, 4)
    if not fds:
        raise ValueError("no socket came with the message")
    return message, fds
