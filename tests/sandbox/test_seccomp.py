"""The sandbox's system-call filter on this machine's kernel, without bubblewrap: a child
process installs it as bubblewrap would, then tries what it refuses and what it allows."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess

import pytest

from gateway.sandbox import seccomp

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def under_filter(program: bytes | None, attempt: str) -> int:
    """Run `attempt` in a forked child under `program` (no filter when None); its errno
    (0: it worked)."""
    child = os.fork()
    if child == 0:
        code = 99
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if program is not None:
                buffer = ctypes.create_string_buffer(program, len(program))
                fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
                if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                    os._exit(98)
                if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog)) != 0:
                    os._exit(97)
            if attempt == "unshare":
                failed = libc.unshare(seccomp.CLONE_NEWUSER) != 0
                code = ctypes.get_errno() if failed else 0
            else:
                done = subprocess.run(["true"], check=False)
                code = 0 if done.returncode == 0 else 96
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])


@pytest.fixture
def program() -> bytes:
    found = seccomp.no_user_namespaces()
    if found is None:
        pytest.skip(f"no filter is written for {os.uname().machine}")
    return found


def test_a_new_user_namespace_is_refused_and_a_program_still_starts(program: bytes) -> None:
    # This process may make one without the filter (it is root): the filter is what refuses.
    assert under_filter(None, "unshare") == 0
    assert under_filter(program, "unshare") == errno.EPERM
    assert under_filter(program, "program") == 0


def test_an_architecture_without_known_numbers_gets_no_filter() -> None:
    assert seccomp.no_user_namespaces("riscv64") is None
    for machine in ("x86_64", "aarch64"):
        program = seccomp.no_user_namespaces(machine)
        assert program is not None and len(program) % 8 == 0
    # Two architectures, two programs: the numbers are each one's own.
    assert seccomp.no_user_namespaces("x86_64") != seccomp.no_user_namespaces("aarch64")
