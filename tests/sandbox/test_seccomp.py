"""The sandbox's system-call filter on this machine's kernel, without bubblewrap: a fresh
interpreter installs it as bubblewrap would, then makes the probe app's attempts (one
author for them: `probe_app.py`)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import seccomp

# Installs the filter given in hex (none when empty), then prints the outcome of each
# attempt: an errno, or what the attempt returned.
UNDER_FILTER = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
import probe_app

program = bytes.fromhex(sys.argv[2])
if program:
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog)) == 0  # PR_SET_SECCOMP, MODE_FILTER
outcome = {}
for attempt in sys.argv[3].split(","):
    try:
        done = probe_app.spawn() if attempt == "spawn" else probe_app.user_namespace(attempt)
        outcome[attempt] = {"ok": done}
    except OSError as exc:
        outcome[attempt] = {"errno": exc.errno}
print(json.dumps(outcome))
"""


def under_filter(program: bytes | None, *attempts: str) -> dict[str, Any]:
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", UNDER_FILTER, here, (program or b"").hex(), ",".join(attempts)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.fixture
def program() -> bytes:
    found = seccomp.no_user_namespaces()
    if found is None:
        pytest.skip(f"no filter is written for {os.uname().machine}")
    return found


def test_every_way_to_a_user_namespace_is_refused_and_programs_still_start(
    program: bytes,
) -> None:
    ways = ("unshare", "clone", "clone3")
    without = under_filter(None, *ways)
    if any("errno" in without[way] for way in ways):
        pytest.skip(f"this kernel refuses user namespaces here by itself: {without}")

    under = under_filter(program, *ways, "spawn")
    assert under["unshare"] == under["clone"] == {"errno": errno.EPERM}
    assert under["clone3"] == {"errno": errno.ENOSYS}  # libc then falls back to clone
    assert under["spawn"]["ok"]["thread"] == ["ran"]
    assert under["spawn"]["ok"]["program"] == str(os.getuid())


def test_an_architecture_without_known_numbers_gets_no_filter() -> None:
    assert seccomp.no_user_namespaces("riscv64") is None
    for machine in ("x86_64", "aarch64"):
        program = seccomp.no_user_namespaces(machine)
        assert program is not None and len(program) % 8 == 0


def test_each_architecture_refuses_the_same_calls() -> None:
    # One list of what is refused, numbered per architecture: none forgotten on one.
    for arch in seccomp._ARCHES.values():
        assert sorted(arch.refused) == sorted(seccomp.REFUSED)
        assert len(set(arch.refused.values())) == len(seccomp.REFUSED)
