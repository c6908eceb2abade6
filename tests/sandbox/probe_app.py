"""The app the sandbox tests run in a sandbox: it tries, from inside, what an app must not do.

Standard library only. It serves HTTP on the listening socket it is handed as standard
input (`SANDBOX_LISTEN_FD`), and each path is one attempt whose outcome it reports as
JSON: `/connect?port=`, `/resolve?name=`, `/write?path=`, `/read?path=`, `/list?path=`,
`/fork?n=`, `/alloc?mb=`, `/memfd?mb=`, `/shm?mb=`, `/hold?path=&mb=`, `/bigfile?mb=`,
`/fill?path=&mb=`, `/userns?how=`, `/spawn`, `/spin`, `/exit`, `/env`, `/whoami`,
`/version`, `/healthz`. The tests commit this file into a throwaway repository.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlsplit


def attempt(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"ok": True, "result": fn()}
    except BaseException as exc:  # the outcome is the point, whatever it is
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def connect(port: str) -> str:
    with socket.create_connection(("127.0.0.1", int(port)), timeout=2):
        return "connected"


def resolve(name: str) -> list[str]:
    return [str(a[4][0]) for a in socket.getaddrinfo(name, 80)]


def write(path: str) -> str:
    with open(path, "w") as fh:
        fh.write("written from the sandbox")
    return "written"


def read(path: str) -> int:
    with open(path, "rb") as fh:
        return len(fh.read())


CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220}
CLONE3_SYSCALL = 435


class CloneArgs(ctypes.Structure):
    """`struct clone_args` as clone3(2) reads it (its first version, 64 bytes)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
        )
    ]


def user_namespace(how: str) -> str:
    """Make a user namespace: by `unshare(2)`, by a raw `clone(2)` or `clone3(2)`, or with
    the `unshare` command (as root inside it)."""
    if how == "command":
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "id", "-u"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(done.returncode, done.stderr.strip())
        return done.stdout.strip()
    libc = ctypes.CDLL(None, use_errno=True)
    if how == "unshare":
        # From a child of its own: a process with threads (this server) may not unshare.
        child = os.fork()
        if child == 0:
            os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else ctypes.get_errno())
        code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        if code != 0:
            raise OSError(code, os.strerror(code))
        return "unshared"
    if how == "clone3":
        args = CloneArgs(flags=CLONE_NEWUSER, exit_signal=SIGCHLD)
        child = libc.syscall(CLONE3_SYSCALL, ctypes.byref(args), ctypes.sizeof(args))
    else:
        machine = os.uname().machine
        child = libc.syscall(CLONE_SYSCALL[machine], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if child == 0:
        os._exit(0)
    if child < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    os.waitpid(child, 0)
    return "cloned"


def spawn() -> dict[str, Any]:
    """What an app does every day: run a program, start a thread."""
    ran = subprocess.run(["id", "-u"], capture_output=True, text=True, timeout=10, check=True)
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append("ran"))
    thread.start()
    thread.join(10)
    return {"program": ran.stdout.strip(), "thread": seen}


def fork(n: str) -> dict[str, Any]:
    children: list[int] = []
    try:
        for _ in range(int(n)):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        return {"forked": len(children), "stopped_by": str(exc)}
    return {"forked": len(children)}


def alloc(mb: str) -> int:
    block = bytearray(int(mb) * 1024 * 1024)
    return len(block)


def bigfile(mb: str) -> str:
    return fill(os.path.join(os.environ["SANDBOX_DATA"], "big"), mb)


def fill(path: str, mb: str) -> str:
    chunk = b"x" * (1024 * 1024)
    with open(path, "wb") as fh:
        for _ in range(int(mb)):
            fh.write(chunk)
            fh.flush()
    return "written"


def memfd(mb: str) -> int:
    """Memory no address-space limit counts: a memfd, every page of it touched."""
    size = int(mb) * 1024 * 1024
    fd = os.memfd_create("probe")
    os.ftruncate(fd, size)
    with mmap.mmap(fd, size) as pages:
        for offset in range(0, size, mmap.PAGESIZE):
            pages[offset] = 1
    HELD.append(fd)  # held past the request, as an attacker would
    return size


def shm(mb: str) -> int:
    """SysV shared memory, attached and touched (it outlives the process that made it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    size = int(mb) * 1024 * 1024
    ipc_private, ipc_creat = 0, 0o1000
    segment = libc.shmget(ipc_private, ctypes.c_size_t(size), ipc_creat | 0o600)
    if segment < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    address = libc.shmat(segment, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    ctypes.memset(address, 1, size)
    return size


def hold(path: str, mb: str) -> str:
    """A file written, unlinked and kept open: no walk of the folder sees it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(path)
    chunk = b"x" * (1024 * 1024)
    for _ in range(int(mb)):
        os.write(fd, chunk)
    HELD.append(fd)
    return "held"


HELD: list[int] = []


def spin() -> NoReturn:
    while True:
        pass


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body: Any
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        route = url.path
        if route == "/healthz":
            body = {"ok": True}
        elif route == "/version":
            with open("VERSION") as fh:
                body = {"version": fh.read().strip(), "commit": os.environ.get("SANDBOX_COMMIT")}
        elif route == "/connect":
            body = attempt(lambda: connect(q["port"]))
        elif route == "/resolve":
            body = attempt(lambda: resolve(q["name"]))
        elif route == "/write":
            body = attempt(lambda: write(q["path"]))
        elif route == "/read":
            body = attempt(lambda: read(q["path"]))
        elif route == "/list":
            body = attempt(lambda: sorted(os.listdir(q["path"])))
        elif route == "/fork":
            body = attempt(lambda: fork(q["n"]))
        elif route == "/alloc":
            body = attempt(lambda: alloc(q["mb"]))
        elif route == "/bigfile":
            body = attempt(lambda: bigfile(q["mb"]))
        elif route == "/fill":
            body = attempt(lambda: fill(q["path"], q["mb"]))
        elif route == "/memfd":
            body = attempt(lambda: memfd(q["mb"]))
        elif route == "/shm":
            body = attempt(lambda: shm(q["mb"]))
        elif route == "/hold":
            body = attempt(lambda: hold(q["path"], q["mb"]))
        elif route == "/userns":
            body = attempt(lambda: user_namespace(q["how"]))
        elif route == "/spawn":
            body = attempt(spawn)
        elif route == "/spin":
            spin()
        elif route == "/exit":
            os._exit(3)
        elif route == "/env":
            body = dict(os.environ)
        elif route == "/whoami":
            body = {
                "uid": os.getuid(),
                "gid": os.getgid(),
                "pid": os.getpid(),
                "groups": os.getgroups(),
                "host": socket.gethostname(),
            }
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> int:
    listener = socket.socket(fileno=int(os.environ["SANDBOX_LISTEN_FD"]))
    server = ThreadingHTTPServer(("", 0), Handler, bind_and_activate=False)
    server.socket = listener
    server.daemon_threads = True
    print("probe app ready", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
