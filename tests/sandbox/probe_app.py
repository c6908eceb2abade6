"""The app the sandbox tests run in a sandbox: it tries, from inside, what an app must not do.

Standard library only. It serves HTTP on the listening socket it is handed as standard
input (`SANDBOX_LISTEN_FD`), and each path is one attempt whose outcome it reports as
JSON: `/connect?port=`, `/resolve?name=`, `/write?path=`, `/read?path=`, `/list?path=`,
`/fork?n=&reap=`, `/alloc?mb=`, `/bigfile?mb=`, `/fill?path=&mb=`, `/deep?n=&mb=`,
`/hold?n=&mb=`, `/shm?mb=`, `/memfd?mb=`, `/sem?sets=`, `/syscall?name=`, `/key?do=`,
`/userns?how=`, `/spawn`, `/spin`, `/exit`, `/env`, `/whoami`, `/version`, `/healthz`. The
tests commit this file into a throwaway repository.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
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


def fork(n: str, reap: bool) -> dict[str, Any]:
    """Fork up to `n` children that sleep a minute: how many the budget let live at once.

    `reap`: the children are ended before the answer, so the app's next request (a thread
    of its own, counted in the same budget) is not refused by what this one left running."""
    children: list[int] = []
    outcome: dict[str, Any] = {}
    try:
        for _ in range(int(n)):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        outcome["stopped_by"] = str(exc)
    finally:
        for pid in children if reap else ():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return {"forked": len(children), **outcome}


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


def deep(n: str, mb: str) -> dict[str, Any]:
    """A chain of `n` folders below /data, then `mb` MiB written at its bottom."""
    os.chdir(os.environ["SANDBOX_DATA"])
    try:
        for _ in range(int(n)):
            os.mkdir("d")
            os.chdir("d")
        written = 0
        try:
            fill("f", mb)
            written = int(mb)
        except OSError as exc:
            return {"depth": int(n), "stopped_by": str(exc)}
        return {"depth": int(n), "written_mb": written}
    finally:
        os.chdir("/app")


HELD: list[Any] = []


def hold(n: str, mb: str) -> dict[str, Any]:
    """`n` files of `mb` MiB in /data, each unlinked at once and held open: no walk of the
    folder sees them."""
    chunk = b"x" * (1024 * 1024)
    held = 0
    try:
        for i in range(int(n)):
            path = os.path.join(os.environ["SANDBOX_DATA"], f"held-{i}")
            fh = open(path, "wb")  # noqa: SIM115 - held on purpose
            os.unlink(path)
            HELD.append(fh)
            for _ in range(int(mb)):
                fh.write(chunk)
                fh.flush()
                held += 1
    except OSError as exc:
        return {"held_mb": held, "stopped_by": str(exc)}
    return {"held_mb": held}


SEGMENT_MB = 16


def shm(mb: str) -> dict[str, Any]:
    """`mb` MiB of SysV shared memory in segments of `SEGMENT_MB`, each filled, detached and
    left behind: a segment stays until removed, attached by no process (so no address
    space counts it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    size = SEGMENT_MB * 1024 * 1024
    held = 0
    for _ in range(int(mb) // SEGMENT_MB):
        segment = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT
        if segment < 0:
            code = ctypes.get_errno()
            return {"held_mb": held, "stopped_by": os.strerror(code), "errno": code}
        address = libc.shmat(segment, None, 0)
        if address is None or address == ctypes.c_void_p(-1).value:
            code = ctypes.get_errno()
            return {"held_mb": held, "stopped_by": os.strerror(code), "errno": code}
        ctypes.memset(address, 1, size)
        libc.shmdt(address)
        held += SEGMENT_MB
    return {"held_mb": held}


def memfd(mb: str) -> dict[str, Any]:
    """`mb` MiB in memfds of `SEGMENT_MB`, written (never mapped: no address space counts
    them) and held open."""
    chunk = b"x" * (1024 * 1024)
    held = 0
    for _ in range(int(mb) // SEGMENT_MB):
        try:
            fd = os.memfd_create("held")
            HELD.append(fd)
            for _ in range(SEGMENT_MB):
                os.write(fd, chunk)
                held += 1
        except OSError as exc:
            return {"held_mb": held, "stopped_by": str(exc), "errno": exc.errno}
    return {"held_mb": held}


def available_kib() -> int:
    with open("/proc/meminfo") as fh:  # the machine's, not the namespace's
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def sem(sets: str) -> dict[str, Any]:
    """`sets` System V semaphore sets of the most semaphores a set may hold: kernel memory
    that outlives every process and that no address space counts."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = available_kib()
    made = 0
    for _ in range(int(sets)):
        if libc.semget(0, 32000, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT
            code = ctypes.get_errno()
            return {"sets": made, "errno": code, "stopped_by": os.strerror(code)}
        made += 1
    return {"sets": made, "host_mib_taken": (before - available_kib()) // 1024}


# x86-64 and arm64 numbers of the calls an app has no need for.
SYSCALLS = {
    "x86_64": {
        "io_uring_setup": 425,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "pidfd_open": 434,
        "memfd_create": 319,
        "shmget": 29,
        "msgget": 68,
        "semget": 64,
    },
    "aarch64": {
        "io_uring_setup": 425,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "pidfd_open": 434,
        "memfd_create": 279,
        "shmget": 194,
        "msgget": 186,
        "semget": 190,
    },
}


def syscall(name: str) -> str:
    """Call `name` with arguments that make it do something small and harmless when it is
    allowed; its errno when refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = SYSCALLS[os.uname().machine][name]
    if name == "io_uring_setup":
        params = ctypes.create_string_buffer(120)
        args: tuple[Any, ...] = (1, params)
    elif name == "perf_event_open":
        raw = bytearray(128)
        # PERF_TYPE_SOFTWARE (1), PERF_COUNT_SW_CPU_CLOCK (0), the struct's size; this
        # process, any CPU; exclude_kernel (bit 5): no paranoia level refuses it for that.
        raw[0:4] = (1).to_bytes(4, "little")
        raw[4:8] = (128).to_bytes(4, "little")
        raw[40:48] = (1 << 5).to_bytes(8, "little")
        attr = ctypes.create_string_buffer(bytes(raw), 128)
        args = (attr, 0, -1, -1, 0)
    elif name == "userfaultfd":
        args = (1,)  # UFFD_USER_MODE_ONLY: allowed to anyone by the kernel itself
    elif name == "keyctl":
        args = (0, -4, 1)  # KEYCTL_GET_KEYRING_ID of the user keyring, creating it
    elif name == "add_key":
        args = (b"user", b"probe", b"secret", 6, -4)
    elif name == "request_key":
        args = (b"user", b"probe", None, 0)
    elif name == "pidfd_open":
        args = (os.getpid(), 0)
    elif name == "memfd_create":
        args = (b"probe", 0)
    elif name == "shmget":
        args = (0, 4096, 0o1600)
    elif name == "semget":
        args = (0, 1, 0o1600)
    else:
        args = (0, 0o1600)
    result = libc.syscall(number, *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return "allowed"


def key(do: str) -> str:
    """Store a key in this user's keyring (`store`), or read one stored there (`read`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    numbers = SYSCALLS[os.uname().machine]
    if do == "store":
        result = libc.syscall(numbers["add_key"], b"user", b"left", b"org-a-secret", 12, -4)
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return "stored"
    found = libc.syscall(numbers["request_key"], b"user", b"left", None, 0)
    if found < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    buffer = ctypes.create_string_buffer(64)
    size = libc.syscall(numbers["keyctl"], 11, found, buffer, 64)  # KEYCTL_READ
    if size < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return buffer.raw[:size].decode()


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
            body = attempt(lambda: fork(q["n"], q.get("reap") == "1"))
        elif route == "/alloc":
            body = attempt(lambda: alloc(q["mb"]))
        elif route == "/bigfile":
            body = attempt(lambda: bigfile(q["mb"]))
        elif route == "/fill":
            body = attempt(lambda: fill(q["path"], q["mb"]))
        elif route == "/deep":
            body = attempt(lambda: deep(q["n"], q.get("mb", "0")))
        elif route == "/hold":
            body = attempt(lambda: hold(q["n"], q["mb"]))
        elif route == "/shm":
            body = attempt(lambda: shm(q["mb"]))
        elif route == "/memfd":
            body = attempt(lambda: memfd(q["mb"]))
        elif route == "/sem":
            body = attempt(lambda: sem(q["sets"]))
        elif route == "/syscall":
            body = attempt(lambda: syscall(q["name"]))
        elif route == "/key":
            body = attempt(lambda: key(q["do"]))
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
