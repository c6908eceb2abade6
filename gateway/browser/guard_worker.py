"""The guard's own process: the task browsers' origin proxies, off the gateway's event loop.

Every byte a task's pages load goes through its context's guard proxy. Served by the
gateway's own event loop, those bytes compete with every tool call, tab message and
evidence commit for one Python thread; here they have a process (and a core) of their
own. The rules are the same code (`guard_proxy.OriginProxy`, `gateway.core.origins`): this
process only hosts them.

The gateway (`guard_process.py`) starts it with one end of a wire (`guard_wire.py`) and
tells it, in order:

- `jail` (with the socket): serve this browser's guard socket (`jail_routes.py`);
- `forget`: that browser is gone;
- `open`: a context's proxy at a loopback address of the jails; `allow` and `route` set
  its origins and which of them are reached through the gateway (a provisioned app);
  `close` ends it (answered once its connections are closed);
- `counts`: what a context's proxy has done (answered).

It tells the gateway `blocked` for each request a proxy refused, before the browser has
its refusal, and asks it `connect` for a stream to a routed origin (answered with the
socket). When the wire closes (the gateway is gone), it ends.

Run as `python -m gateway.browser.guard_worker FD`, FD being its end of the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from dataclasses import asdict
from typing import Any

from .guard_proxy import OriginProxy
from .guard_wire import Message, Wire, close_fds
from .guards import BlockedRequest
from .jail_routes import JailRoutes

log = logging.getLogger("gateway.browser.guard_worker")

READY = {"op": "ready"}


class GuardWorker:
    """The proxies of the gateway's task contexts, by address, and the jails they serve."""

    def __init__(self, wire_socket: socket.socket) -> None:
        self.routes = JailRoutes()
        self.proxies: dict[str, OriginProxy] = {}
        self.done = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.wire = Wire(wire_socket, self._on_message, self.done.set)

    async def run(self) -> None:
        self.wire.send(READY)
        await self.done.wait()
        for proxy in list(self.proxies.values()):
            await proxy.close()
        self.routes.close()

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_message(self, message: Message, fds: list[int]) -> None:
        try:
            self._handle(message, fds)
        except (KeyError, ValueError, TypeError) as exc:
            # A context closed meanwhile, or a message this version does not know: a
            # question still gets its answer, so nobody waits for one that never comes.
            log.error("a guard message could not be handled: %r", exc)
            if "id" in message:
                self.wire.answer(message, {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            close_fds(fds)  # sockets no message kept

    def _handle(self, message: Message, fds: list[int]) -> None:
        op = message.get("op")
        if op == "jail":
            pid = int(message["pid"])
            guard = socket.socket(fileno=fds.pop(0))
            self._spawn(self.routes.serve(pid, guard))
        elif op == "forget":
            self.routes.forget(int(message["pid"]))
        elif op == "open":
            self._open(str(message["address"]), message.get("pid"))
        elif op == "allow":
            self._proxy(message).allow(frozenset(message["origins"]))
        elif op == "route":
            self._route(message)
        elif op == "synced":
            self.wire.answer(message, {})
        elif op == "close":
            self._spawn(self._close(message))
        elif op == "counts":
            self.wire.answer(message, asdict(self._proxy(message).tally()))
        else:
            raise ValueError(f"unknown message {str(op)[:100]!r}")

    def _proxy(self, message: Message) -> OriginProxy:
        return self.proxies[str(message["address"])]

    def _open(self, address: str, pid: Any) -> None:
        def blocked(request: BlockedRequest) -> None:
            # Sent before the proxy answers the browser: the gateway knows of the refusal
            # before the page can.
            self.wire.send({"op": "blocked", "address": address, **asdict(request)})

        proxy = OriginProxy(blocked)
        proxy.attach(self.routes, address, None if pid is None else int(pid))
        self.proxies[address] = proxy

    def _route(self, message: Message) -> None:
        address, origin = str(message["address"]), str(message["origin"])

        async def opener() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            answer, fds = await self.wire.ask(
                {"op": "connect", "address": address, "origin": origin}
            )
            if not fds:
                raise ConnectionRefusedError(str(answer.get("error", "no connection")))
            stream = socket.socket(fileno=fds.pop())
            close_fds(fds)
            return await asyncio.open_connection(sock=stream)

        self._proxy(message).route(origin, opener)

    async def _close(self, message: Message) -> None:
        proxy = self.proxies.pop(str(message["address"]), None)
        if proxy is not None:
            await proxy.close()
        self.wire.answer(message, {})


async def serve(fd: int) -> None:
    worker = GuardWorker(socket.socket(fileno=fd))
    await worker.run()


def main() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="guard process: %(levelname)s %(name)s: %(message)s"
    )
    try:
        fd = int(sys.argv[1])
    except (IndexError, ValueError):
        sys.exit("usage: python -m gateway.browser.guard_worker FD")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(fd))


if __name__ == "__main__":
    main()
