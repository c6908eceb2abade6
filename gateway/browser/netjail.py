"""The task browser's network jail: Chromium runs where the only thing it can reach is the guard.

This file is a program, not a module of the gateway: Playwright starts it as the browser's
executable (through the launcher script `jail.py` writes), with Chromium's arguments and
Playwright's pipe on fds 3 and 4. It uses the standard library only and imports nothing of
the gateway, so it starts in a few milliseconds under `python -I -S`. It:

1. moves into a network namespace of its own (with a user namespace of its own when it is
   not root), whose only interface is a loopback nobody else shares: no UDP, QUIC, WebRTC
   or DNS packet has a way out of it, whatever a page does;
2. opens there the one listening socket through which the browser's contexts reach their
   guard proxies (each context at a loopback address of its own, on the same port), and
   hands it to the gateway over a unix socket; the gateway serves it from outside;
3. when started as root, gives root up for the browser's own user, so that Chromium runs
   with its own sandbox;
4. becomes Chromium (exec), which keeps the pid Playwright knows and its pipe.

Any failure exits non-zero before Chromium starts: a browser is jailed or does not run.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys
from typing import NoReturn

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_NO_NEW_PRIVS = 38
ACK_TIMEOUT_S = 15.0

# What the gateway passes in the environment (and nothing of it reaches Chromium).
CONTROL = "GATEWAY_JAIL_CONTROL"  # the gateway's unix socket
BROWSER = "GATEWAY_JAIL_BROWSER"  # the real Chromium executable
PORT = "GATEWAY_JAIL_PORT"  # the guard's port inside the jail
USER = "GATEWAY_JAIL_USER"  # "uid:gid" to run Chromium as, when started as root


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"gateway network jail: {message}\n")
    sys.stderr.flush()
    os._exit(70)


def enter_namespaces(libc: ctypes.CDLL) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        fail(f"cannot create a network namespace: {os.strerror(ctypes.get_errno())}")
    if flags & CLONE_NEWUSER:
        # The same ids inside as outside: Chromium must not believe it is root.
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"{gid} {gid} 1")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def hand_over_guard_socket(control: str, port: int) -> None:
    """Listen on every loopback address of the jail at `port`; give the socket away."""
    guard = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    guard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    guard.bind(("0.0.0.0", port))  # noqa: S104 - the jail's own loopback is all there is
    guard.listen(1024)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as link:
        link.settimeout(ACK_TIMEOUT_S)
        link.connect(control)
        hello = json.dumps({"pid": os.getpid(), "port": port}).encode()
        socket.send_fds(link, [hello], [guard.fileno()])
        # The gateway serves the socket before the browser may use it.
        if link.recv(16) != b"ok":
            fail("the gateway did not take the guard socket")
    guard.close()


def become_browser_user(spec: str, argv: list[str]) -> None:
    uid, gid = (int(part) for part in spec.split(":", 1))
    profile = next((a.split("=", 1)[1] for a in argv if a.startswith("--user-data-dir=")), None)
    if profile:
        # Playwright made the profile as root, mode 0700: it becomes the browser user's.
        for root, dirs, files in os.walk(profile):
            os.chown(root, uid, gid)
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, gid)
        os.environ["HOME"] = profile
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        fail("could not give up root")


def main() -> None:
    argv = sys.argv[1:]
    try:
        control, browser, port = os.environ[CONTROL], os.environ[BROWSER], int(os.environ[PORT])
    except (KeyError, ValueError):
        fail(f"{CONTROL}, {BROWSER} and {PORT} must be set")
    user = os.environ.get(USER)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        enter_namespaces(libc)
        loopback_up()
        hand_over_guard_socket(control, port)
        if os.geteuid() == 0:
            if not user:
                fail(f"{USER} is required when started as root")
            become_browser_user(user, argv)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except OSError as exc:
        fail(str(exc))
    for name in (CONTROL, BROWSER, PORT, USER):
        os.environ.pop(name, None)
    os.execv(browser, [browser, *argv])  # noqa: S606 - exec, so Chromium keeps our pid


if __name__ == "__main__":
    main()
