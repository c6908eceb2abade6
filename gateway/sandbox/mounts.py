"""Sized filesystems for a sandbox's data: a tmpfs per sandbox, mounted by the gateway.

A folder on the gateway's disk has no size of its own: a meter that sums what it can see
misses what an app unlinked and still holds open, and an app picks how deep its folders
go. A tmpfs mounted with `size=` and `nr_inodes=` is bounded by the kernel instead: a
write past it fails with ENOSPC, open or unlinked alike, and a file past its inodes
cannot be made. Its pages are memory (swappable), bounded by that size; unmounting it
frees them whatever the app left, at any depth.

Mounted `nosuid,nodev` with mode 0700 for the sandbox's own user, at a folder below the
sandbox dir (the jail binds it as /data). The kernel's own answer is read back
(`statvfs`), never assumed from what was asked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from pathlib import Path

MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass(frozen=True)
class Sized:
    """What the kernel says a mounted tmpfs holds at most."""

    bytes: int
    entries: int


def mount_tmpfs(path: Path, *, size: int, entries: int, uid: int) -> Sized:
    """Mount a tmpfs of `size` bytes and `entries` files and folders (its root aside) at
    the empty folder `path`, owned by `uid`; what the kernel made of it."""
    options = f"size={size},nr_inodes={entries + 1},mode=0700,uid={uid},gid={uid}"
    if (
        _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())
        != 0
    ):
        code = ctypes.get_errno()
        raise OSError(code, f"a tmpfs could not be mounted: {os.strerror(code)}", str(path))
    try:
        return sized(path)
    except OSError:
        unmount(path)
        raise


def sized(path: Path) -> Sized:
    info = os.statvfs(path)
    # nr_inodes counts the root folder too, which the app cannot remove.
    return Sized(bytes=info.f_blocks * info.f_frsize, entries=info.f_files - 1)


def unmount(path: Path) -> None:
    """Detach the filesystem mounted at `path` (its memory is freed once nothing holds it
    open); never follows a link at `path`."""
    if _libc.umount2(os.fsencode(path), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"could not be unmounted: {os.strerror(code)}", str(path))


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounted_below(root: Path) -> list[Path]:
    """Mount points strictly below `root` in this mount namespace, deepest first."""
    prefix = str(root.resolve()).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as fh:
        points = {_unescape(line.split()[4]) for line in fh if len(line.split()) > 4}
    return sorted((Path(p) for p in points if p.startswith(prefix)), key=lambda p: -len(p.parts))
