"""The gateway's side of the guard's own process (`guard_worker.py`).

The jail (`jail.py`) starts one guard process with itself and hands it each jailed
browser's guard socket; every task context's guard is then a `WorkerGuard`, a handle that
tells the process the context's address, origins and routes. What the gateway keeps of it
(the jails' sockets, each context's origins and routes) is what a new process is told
again if the one running dies: it is started again at once, and only the connections it
held are lost (a page's load in flight fails; the next one goes through). While none runs,
the browsers' connections wait in their jail socket's queue; nothing reaches the network.

Two things go from the process to the gateway: a refused request, handed to the context's
`on_block` (the page-side guard records it against the task), and a request for a stream
to a routed origin (a provisioned app), opened here by the route's opener, whose checks
(an app that is down is refused) stay the gateway's, and handed over as a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from .app_link import Opener
from .errors import browser_unavailable
from .guard_wire import Message, Wire, WireClosed, close_fds, pair
from .guards import BlockedRequest, GuardCounts, from_message
from .jail_routes import GUARD_PORT

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0
# A process that will not start is tried again this often, for as long as the jail runs.
RESTART_EVERY_S = 1.0

OnBlock = Callable[[BlockedRequest], None]


class GuardUnavailable(RuntimeError):
    """The guard process could not be started."""


class WorkerGuard:
    """One task context's guard, served by the guard process (`ContextGuard`)."""

    def __init__(
        self,
        host: GuardProcess,
        address: str,
        pid: int | None,
        on_block: OnBlock,
        release: Callable[[str], None],
    ) -> None:
        self.host = host
        self.address = address
        self.pid = pid
        self.on_block = on_block
        self._release = release
        self._allowed: frozenset[str] = frozenset()
        self.routes: dict[str, Opener] = {}
        self.url = f"http://{address}:{GUARD_PORT}"

    @property
    def allowed(self) -> frozenset[str]:
        return self._allowed

    def allow(self, origins: frozenset[str]) -> None:
        self._allowed = frozenset(origins)
        self.host.send(self._allow_message())

    def route(self, origin: str, opener: Opener) -> None:
        self.routes[origin] = opener
        self.host.send({"op": "route", "address": self.address, "origin": origin})

    async def synced(self) -> None:
        """Wait until the process holds what `allow` and `route` said: the context's next
        connection is judged by them."""
        await self._ask({"op": "synced"})

    async def counts(self) -> GuardCounts:
        return from_message(GuardCounts, await self._ask({"op": "counts", "address": self.address}))

    async def close(self) -> None:
        self.host.guards.pop(self.address, None)
        with contextlib.suppress(WireClosed):
            await self.host.ask({"op": "close", "address": self.address})
        self._release(self.address)

    async def _ask(self, message: Message) -> Message:
        try:
            answer, fds = await self.host.ask(message)
        except WireClosed as exc:
            raise browser_unavailable(f"the browser's guard is not running ({exc})") from exc
        close_fds(fds)
        if "error" in answer:
            raise browser_unavailable(f"the browser's guard refused: {answer['error']}")
        return answer

    def told(self) -> list[Message]:
        """What a (new) process must be told of this context, in order."""
        return [
            {"op": "open", "address": self.address, "pid": self.pid},
            *({"op": "route", "address": self.address, "origin": o} for o in self.routes),
            self._allow_message(),
        ]

    def _allow_message(self) -> Message:
        return {"op": "allow", "address": self.address, "origins": sorted(self._allowed)}


class GuardProcess:
    """The guard process of one jail: started, told, watched, and started again."""

    def __init__(self) -> None:
        self.guards: dict[str, WorkerGuard] = {}
        self.starts = 0
        self._jails: dict[int, socket.socket] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._wire: Wire | None = None
        self._watching: asyncio.Task[None] | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        self._running = asyncio.Event()  # a process is up and told everything
        self._closing = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def start(self) -> None:
        """Start the process; raises `GuardUnavailable` when it does not come up."""
        self._closing = False
        await self._spawn()

    async def close(self) -> None:
        self._closing = True
        self._running.clear()
        if self._watching is not None:
            self._watching.cancel()
            self._watching = None
        for task in list(self._connecting):
            task.cancel()
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()  # the process ends when its wire closes
        if self._process is not None:
            await _stop(self._process)
            self._process = None
        for guard in self._jails.values():
            guard.close()
        self._jails.clear()
        self.guards.clear()

    # -- what the jail tells it ------------------------------------------------------------

    def serve_jail(self, pid: int, guard: socket.socket) -> None:
        """Serve browser `pid`'s guard socket (kept here too, for a process started again)."""
        old = self._jails.pop(pid, None)
        if old is not None:
            old.close()
        self._jails[pid] = guard
        self.send({"op": "jail", "pid": pid}, (guard.fileno(),))

    def forget_jail(self, pid: int) -> None:
        guard = self._jails.pop(pid, None)
        if guard is not None:
            guard.close()
            self.send({"op": "forget", "pid": pid})

    def open(
        self,
        address: str,
        pid: int | None,
        on_block: OnBlock,
        release: Callable[[str], None],
    ) -> WorkerGuard:
        guard = WorkerGuard(self, address, pid, on_block, release)
        self.guards[address] = guard
        for message in guard.told():
            self.send(message)
        return guard

    def send(self, message: Message, fds: tuple[int, ...] = ()) -> None:
        # While no process runs, the message is not lost: a new one is told it all again.
        if self._wire is not None:
            self._wire.send(message, fds)

    async def ask(self, message: Message) -> tuple[Message, list[int]]:
        """Ask the running process; while one is being started again, wait for it (a
        while), as a browser's connections wait in their jail socket's queue."""
        for last in (False, True):
            if self._wire is None and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._running.wait(), START_TIMEOUT_S)
            if self._wire is None:
                raise WireClosed("the guard process is not running")
            try:
                return await self._wire.ask(message)
            except WireClosed:
                # It died with the question asked: the next process, told everything
                # again, is asked once more (each question is one that may be repeated).
                if last or self._closing:
                    raise
        raise AssertionError("unreachable")

    # -- the process -----------------------------------------------------------------------

    async def _spawn(self) -> None:
        ours, theirs = pair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway.browser.guard_worker",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # Its life is the wire's: a Ctrl-C or a signal to the gateway's process
                # group must not end it before the gateway closes the wire.
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise GuardUnavailable(f"the guard process could not start: {exc}") from exc
        finally:
            theirs.close()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        wire_box: list[Wire] = []

        def on_message(message: Message, fds: list[int]) -> None:
            if message.get("op") == "ready":
                if not ready.done():
                    ready.set_result(None)
            else:
                self._on_message(wire_box[0], message, fds)

        def on_closed() -> None:
            if not ready.done():
                ready.set_exception(GuardUnavailable("the guard process ended as it started"))
            elif not self._closing and self._wire is wire_box[0]:
                self._lost("its wire closed")

        wire = Wire(ours, on_message, on_closed)
        wire_box.append(wire)
        try:
            await asyncio.wait_for(ready, START_TIMEOUT_S)
        except (TimeoutError, GuardUnavailable) as exc:
            wire.close()
            await _stop(process)
            if isinstance(exc, GuardUnavailable):
                raise
            raise GuardUnavailable("the guard process did not start in time") from exc
        self._process, self._wire = process, wire
        self.starts += 1
        for pid, guard in self._jails.items():
            wire.send({"op": "jail", "pid": pid}, (guard.fileno(),))
        for context in self.guards.values():
            for message in context.told():
                wire.send(message)
        self._watching = asyncio.ensure_future(self._watch(process))
        self._running.set()

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if not self._closing and self._process is process:
            self._lost(f"it exited with {code}")

    def _lost(self, why: str) -> None:
        """The process is gone while the jail runs: start another, told everything."""
        log.error("the guard process is gone (%s); starting it again", why)
        self._running.clear()
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        watching = self._watching
        self._watching = asyncio.ensure_future(self._respawn())
        if watching is not None and watching is not asyncio.current_task():
            watching.cancel()

    async def _respawn(self) -> None:
        while not self._closing:
            try:
                await self._spawn()
                return
            except GuardUnavailable as exc:
                log.error("%s; trying again in %.0f s", exc, RESTART_EVERY_S)
                await asyncio.sleep(RESTART_EVERY_S)

    def _on_message(self, wire: Wire, message: Message, fds: list[int]) -> None:
        close_fds(fds)  # the process sends none of its own
        op = message.get("op")
        guard = self.guards.get(str(message.get("address")))
        if op == "blocked":
            if guard is not None:
                guard.on_block(from_message(BlockedRequest, message))
        elif op == "connect":
            task = asyncio.ensure_future(self._connect(wire, message, guard))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)
        else:
            log.error("the guard process sent an unknown message %.100r", op)

    async def _connect(self, wire: Wire, message: Message, guard: WorkerGuard | None) -> None:
        opener = None if guard is None else guard.routes.get(str(message.get("origin")))
        if opener is None:
            wire.answer(message, {"error": "no route to that origin"})
            return
        try:
            _reader, writer = await opener()
        except (OSError, TimeoutError) as exc:
            wire.answer(message, {"error": str(exc) or type(exc).__name__})
            return
        try:
            stream: Any = writer.get_extra_info("socket")
            wire.answer(message, {}, (stream.fileno(),))
        finally:
            # The process has its own copy of the socket; this one is let go.
            writer.close()


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    try:
        await asyncio.wait_for(process.wait(), 2.0)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
