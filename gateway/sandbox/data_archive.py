"""A sandbox's data folder kept as a gzipped tar, read safely from a folder its app wrote.

The app chose every name, link and depth in the folder, so nothing in it is followed: links
are kept as links, only regular files are read, each opened with O_NOFOLLOW relative to its
folder's descriptor, and a file is read only if it is still the inode that was looked at.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import tarfile
from pathlib import Path

from . import tree

# Folders deep a kept data folder is archived (deeper ones are left out, and said so).
ARCHIVE_MAX_DEPTH = 64

_READ_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def archive(folder: Path, max_bytes: int) -> tuple[bytes | None, str | None]:
    """The folder as a gzipped tar: links kept as links, never followed; only regular
    files read, each opened with O_NOFOLLOW relative to its folder's descriptor (opened
    so too), and what is read is what was looked at (the same inode). Folders deeper than
    `ARCHIVE_MAX_DEPTH` are left out (`tree.walk`: the app chose the depth)."""
    members: list[tuple[str, str, os.stat_result]] = []  # (arcname, name, stat)
    size = 0
    skipped: list[str] = []
    outcome = tree.Walk()
    buffer = io.BytesIO()
    with (
        contextlib.closing(tree.walk(folder, ARCHIVE_MAX_DEPTH, outcome)) as walk,
        tarfile.open(fileobj=buffer, mode="w:gz") as tar,
    ):
        for entry in walk:
            base = f"data/{entry.path}" if entry.path else "data"
            if not entry.path:
                tar.addfile(_tarinfo("data", os.fstat(entry.fd)))
            for name in [*entry.dirs, *entry.files]:
                try:
                    info = os.stat(name, dir_fd=entry.fd, follow_symlinks=False)
                except OSError:
                    continue
                members.append((f"{base}/{name}", name, info))
                if stat.S_ISREG(info.st_mode):
                    size += info.st_size
            if size > max_bytes:
                return None, f"the data folder holds more than {max_bytes} bytes, the most kept"
            for arcname, name, info in members:
                if not _add(tar, arcname, name, info, entry.fd):
                    skipped.append(arcname)
            members.clear()
    notes = []
    if skipped:
        notes.append(f"entries that changed while archived were left out: {skipped[:20]}")
    if outcome.too_deep:
        notes.append(
            f"folders deeper than {ARCHIVE_MAX_DEPTH} were left out: {outcome.too_deep[:5]}"
        )
    return buffer.getvalue(), "; ".join(notes) or None


def _tarinfo(arcname: str, info: os.stat_result) -> tarfile.TarInfo:
    member = tarfile.TarInfo(arcname)
    member.mode = stat.S_IMODE(info.st_mode)
    member.mtime = int(info.st_mtime)
    member.uid, member.gid = info.st_uid, info.st_gid
    member.type = tarfile.DIRTYPE
    return member


def _add(tar: tarfile.TarFile, arcname: str, name: str, info: os.stat_result, dir_fd: int) -> bool:
    """Add one entry of the folder; False when it is not what it was a moment ago."""
    member = _tarinfo(arcname, info)
    if stat.S_ISDIR(info.st_mode):
        tar.addfile(member)
        return True
    if stat.S_ISLNK(info.st_mode):
        # A link's own target, read as text: nothing it points to is opened.
        member.type = tarfile.SYMTYPE
        try:
            member.linkname = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return False
        tar.addfile(member)
        return True
    if not stat.S_ISREG(info.st_mode):
        return True  # a fifo or socket the app made: nothing to keep, never opened
    try:
        fd = os.open(name, _READ_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            return False  # swapped for a link, or gone
        raise
    with os.fdopen(fd, "rb") as fh:
        now = os.fstat(fh.fileno())
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(now.st_mode):
            return False
        member.type = tarfile.REGTYPE
        member.size = now.st_size
        # Nothing of the sandbox runs any more (the caller checked): it cannot shrink.
        tar.addfile(member, fh)
    return True
