"""The system-call filter of a local sandbox: no new user namespaces, and no kernel
interface an app serving HTTP has no need for.

An unprivileged process may create a user namespace of its own on most Linux systems, and
inside it holds every capability over what that namespace owns: it can mount, make
network and PID namespaces, and reach kernel code that only root reaches otherwise, which
is where most of the kernel's local privilege escalations have been found. An app in a
sandbox needs none of it, so the jail refuses it with a seccomp filter that bubblewrap
installs (`--seccomp FD`) before the app's first instruction:

- `unshare` and `clone` with `CLONE_NEWUSER` in their flags fail with `EPERM`;
- `clone3`, whose flags are in memory a filter cannot read, fails with `ENOSYS`, on which
  the C library falls back to `clone` (so threads and processes still start);
- a system call of another ABI (32-bit `int 0x80`, x32), whose numbers differ, fails with
  `ENOSYS`: a way around the first two rules otherwise;
- the calls in `REFUSED` fail with `ENOSYS`, as on a kernel built without them (programs
  that can do without them check for that answer and fall back):
  - `io_uring_*`, `perf_event_open`, `userfaultfd`: large kernel surfaces that have held
    many of its privilege escalations, which a web app never needs;
  - `memfd_create`, `memfd_secret`, `shmget`, `msgget`, `semget`: memory no
    address-space limit counts (a memfd written, not mapped; a System V segment, message
    queue or semaphore set outlives every process that used it, and the kernel's default
    limits for a new IPC namespace let one app hold gigabytes of them). Without a
    delegated cgroup nothing else bounds them;
  - `keyctl`, `add_key`, `request_key`: the kernel keyrings are the uid's, not the
    sandbox's, and a uid is handed to the next sandbox once this one is gone: refused,
    no sandbox stores a key a later one could read;
  - `pidfd_open`, `pidfd_getfd`: a handle on a process, and a copy of its descriptors;
- everything else is allowed.

The filter is classic BPF, assembled here for the architectures listed in `_ARCHES`; on
another one there is no filter, and the manifest does not list it among the enforcers.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from dataclasses import dataclass

# What the manifest's `enforced_by` calls this filter.
ENFORCER = "seccomp:no-user-namespaces"

CLONE_NEWUSER = 0x10000000

# Classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# Offsets in `struct seccomp_data`: the call's number, its ABI, its first argument's low
# half (little-endian: every architecture listed).
_NR, _ARCH, _ARG0_LOW = 0, 4, 16


# The calls refused outright (module docstring: why), as the manifest names them: kernel
# surfaces no app needs, refused by every provider, and memory no limit of this jail
# counts (a provider whose sandbox has a memory cgroup of its own counts it there instead).
KERNEL_SURFACES = (
    "add_key",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "keyctl",
    "perf_event_open",
    "pidfd_getfd",
    "pidfd_open",
    "request_key",
    "userfaultfd",
)
UNCOUNTED_MEMORY = ("memfd_create", "memfd_secret", "msgget", "semget", "shmget")
REFUSED = tuple(sorted(KERNEL_SURFACES + UNCOUNTED_MEMORY))
# Numbered alike on both architectures below (the newer, shared table).
_SHARED = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "pidfd_open": 434,
    "pidfd_getfd": 438,
    "memfd_secret": 447,
}


@dataclass(frozen=True)
class _Arch:
    audit: int  # AUDIT_ARCH_* of the native ABI
    unshare: int
    clone: int
    clone3: int
    refused: dict[str, int]
    # Numbers at or above this are another ABI sharing the native one's tag (x32), or None.
    foreign_from: int | None = None


_ARCHES = {
    "x86_64": _Arch(
        0xC000003E,
        unshare=272,
        clone=56,
        clone3=435,
        refused={
            **_SHARED,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "memfd_create": 319,
            "shmget": 29,
            "msgget": 68,
            "semget": 64,
        },
        foreign_from=0x40000000,
    ),
    "aarch64": _Arch(
        0xC00000B7,
        unshare=97,
        clone=220,
        clone3=435,
        refused={
            **_SHARED,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "memfd_create": 279,
            "shmget": 194,
            "msgget": 186,
            "semget": 190,
        },
    ),
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _assemble(arch: _Arch) -> bytes:
    enosys, eperm = _RET_ERRNO | errno.ENOSYS, _RET_ERRNO | errno.EPERM
    program = [
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ_K, arch.audit, jt=1),  # the native ABI: go on
        _op(_RET_K, enosys),
        _op(_LD_W_ABS, _NR),
    ]
    if arch.foreign_from is not None:
        program += [_op(_JGE_K, arch.foreign_from, jf=1), _op(_RET_K, enosys)]
    for number in (arch.clone3, *sorted(arch.refused.values())):
        program += [_op(_JEQ_K, number, jf=1), _op(_RET_K, enosys)]
    program += [
        _op(_JEQ_K, arch.unshare, jt=1),
        _op(_JEQ_K, arch.clone, jf=3),
        # unshare or clone: look at the flags
        _op(_LD_W_ABS, _ARG0_LOW),
        _op(_JSET_K, CLONE_NEWUSER, jf=1),
        _op(_RET_K, eperm),
        _op(_RET_K, _RET_ALLOW),
    ]
    return b"".join(program)


def no_user_namespaces(machine: str | None = None) -> bytes | None:
    """The filter's program for `machine` (this one's when None), or None when this module
    does not know its system call numbers."""
    arch = _ARCHES.get(machine or platform.machine())
    return _assemble(arch) if arch is not None else None


def program_fd(program: bytes) -> int:
    """A file descriptor holding `program` from its start, as `bwrap --seccomp` reads it;
    the caller passes it to the jail and closes it."""
    fd = os.memfd_create("sandbox-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
