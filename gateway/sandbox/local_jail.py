"""A local sandbox's jail started: its app's command under bubblewrap, as the sandbox's
user, in its cgroup when it has one, with the system-call filter, and the pid of the jail's
init read back (`--info-fd`) so its PID namespace is held while the jail runs.

A cancellation that lands while the jail is being spawned still leaves the handle knowing
the process, so a teardown can kill it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import TypeVar

from . import seccomp
from .bubblewrap import JailPlan, command_line
from .cgroup import CgroupParent
from .errors import Unhealthy
from .local_sandbox import LocalSandbox

T = TypeVar("T")
INFO_TIMEOUT_S = 10.0


async def start(
    handle: LocalSandbox, *, read_only: list[str], seccomp_program: bytes | None
) -> None:
    """Start the handle's jail (with the system-call filter `seccomp_program`, when there
    is one); raises `Unhealthy` when it does not report its init."""
    assert handle.listener is not None
    with contextlib.ExitStack() as fds:
        info_read, info_write = os.pipe()
        fds.callback(os.close, info_read)
        # What the jail gets a copy of: this end is closed once it is spawned.
        with contextlib.ExitStack() as handed:
            handed.callback(os.close, info_write)
            seccomp_fd = None
            if seccomp_program is not None:
                seccomp_fd = seccomp.program_fd(seccomp_program)
                handed.callback(os.close, seccomp_fd)
            log_fd = os.open(handle.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            handed.callback(os.close, log_fd)
            plan = JailPlan(
                checkout=handle.checkout,
                data=handle.data,
                uid=handle.uid,
                gid=handle.uid,
                limits=handle.limits,
                env=handle.env,
                command=handle.command,
                read_only=read_only,
                info_fd=info_write,
                seccomp_fd=seccomp_fd,
                tmp=handle.tmp,
            )
            argv = command_line(plan)
            if handle.cgroup is not None:
                argv = [*CgroupParent.enter_prefix(handle.cgroup), *argv]
            # The previous jail's namespace (a restart) says nothing of this one.
            handle.release_namespace()
            spawn = asyncio.ensure_future(
                asyncio.create_subprocess_exec(
                    *argv,
                    stdin=handle.listener.fileno(),
                    stdout=log_fd,
                    stderr=log_fd,
                    pass_fds=tuple(fd for fd in (info_write, seccomp_fd) if fd is not None),
                    env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                    # Not in the gateway's process group: a Ctrl-C is the gateway's to
                    # handle, which tears its sandboxes down in order.
                    start_new_session=True,
                )
            )
            # Cancelled here (a teardown cancelling the watcher mid-restart), the jail
            # may already be forked: the handle must know it before the cancellation
            # goes on, or nobody kills it. Its root-run start (bwrap, before setpriv)
            # has no sandbox uid yet, so a sweep by uid could miss it.
            try:
                handle.process = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    handle.process = await _settled(spawn)
                raise
        try:
            child = await asyncio.wait_for(_child_pid(info_read), INFO_TIMEOUT_S)
        except (TimeoutError, ValueError, OSError):
            child = None
    if child is None:
        code = await _exit_code(handle.process)
        raise Unhealthy(
            "the sandbox's jail did not start",
            details={"exit_code": code, "log": handle.log_tail()},
        )
    with contextlib.suppress(OSError):
        handle.hold_namespace(child)


async def _child_pid(fd: int) -> int:
    """The pid bwrap reports for the sandbox's init (`--info-fd`): a JSON object, then more
    that is not read. `fd` stays its caller's to close; the stream reads a copy of it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except BaseException:
        pipe.close()  # the transport did not take it
        raise
    try:
        raw = b""
        while b"}" not in raw:
            chunk = await reader.read(4096)
            if not chunk:
                raise ValueError("the jail ended before it reported")
            raw += chunk
        return int(json.loads(raw[: raw.index(b"}") + 1])["child-pid"])
    finally:
        transport.close()


async def _exit_code(process: asyncio.subprocess.Process) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(process.wait(), 2.0)
    return None


async def _settled(task: asyncio.Future[T]) -> T:
    """`task`'s result, waited for through any cancellation of the caller (who re-raises
    its own cancellation once it holds what it must clean up)."""
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
