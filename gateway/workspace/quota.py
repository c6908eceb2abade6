"""A workspace's quota: the bytes of file contents and the entries it may hold.

Entries are files and directories alike (anything else found on disk counts too): a write
may create up to 31 directories on the way to its file, and each costs an inode and a
block that a count of files alone would never see.

Usage is counted once per workspace and process by a scan of the tree as it is on disk, so
a restart, or a tree an earlier process left, is counted for what it holds. From then on a
running tally is kept: every change to a workspace is made by `files.write` or
`files.edit`, under the tally's lock, and adds exactly what it charged (the size difference
of the file it replaced, the file and directories it created). A change that fails after it
was charged may have done part of its work, so the tally is dropped and the next change
scans again rather than trust a guess.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_files: int


@dataclass
class Usage:
    bytes: int = 0
    files: int = 0  # entries: files, directories, and anything else found


def _list(fd: int, usage: Usage) -> Iterator[str]:
    """Count the entries of the directory `fd` into `usage`; its subdirectories' names."""
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            usage.files += 1
            if stat.S_ISDIR(info.st_mode):
                subdirs.append(entry.name)
            elif stat.S_ISREG(info.st_mode):
                usage.bytes += info.st_size
    return iter(subdirs)


def scan(root: Path) -> Usage:
    """What the tree under `root` holds now. Links are counted, never followed; only the
    directories on the way down are held open, so a wide tree needs no more descriptors
    than a deep one."""
    usage = Usage()
    try:
        top = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return usage
    stack: list[tuple[int, Iterator[str]]] = []
    try:
        _enter(top, usage, stack)
        while stack:
            fd, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or no longer a directory: nothing under it to count
            _enter(child, usage, stack)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return usage


def _enter(fd: int, usage: Usage, stack: list[tuple[int, Iterator[str]]]) -> None:
    """Count the directory `fd` and push it with its subdirectories to visit."""
    try:
        subdirs = _list(fd, usage)
    except BaseException:
        os.close(fd)
        raise
    stack.append((fd, subdirs))


class Change:
    """One write or edit, charged against the workspace's limits before it touches disk."""

    def __init__(self, limits: Limits | None, usage: Usage) -> None:
        self._limits = limits
        self._usage = usage
        self.bytes = 0
        self.files = 0
        self.charged = False

    def charge(self, what: str, *, add_bytes: int, add_files: int) -> None:
        """Refuse (`denied`/`quota_exceeded`) a change that would take the workspace over a
        limit; a change that shrinks it, or keeps it level, is always allowed."""
        limits, used = self._limits, self._usage
        if limits is not None:
            for quota, unit, limit, current, adding in (
                ("workspace_bytes", "bytes", limits.max_bytes, used.bytes, add_bytes),
                ("workspace_files", "entries", limits.max_files, used.files, add_files),
            ):
                if adding > 0 and current + adding > limit:
                    raise ToolFailure(
                        ToolStatus.DENIED,
                        ErrorCode.QUOTA_EXCEEDED,
                        f"{what} would add {adding} {unit} to the workspace's {current}, over "
                        f"its limit of {limit} {unit}; nothing was changed",
                        details={
                            "quota": quota,
                            "limit": limit,
                            "current": current,
                            "adding": adding,
                        },
                    )
        self.bytes, self.files, self.charged = add_bytes, add_files, True


def unlimited() -> Change:
    """A change of a workspace without a quota (tools given a bare `Workspace`)."""
    return Change(None, Usage())


class Tally:
    """One workspace's usage, kept across its changes; one change at a time."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        # A threading lock: the tools run the file operations in worker threads.
        self._lock = threading.Lock()
        self._usage: Usage | None = None

    def usage(self, root: Path) -> Usage:
        """The usage as the tally has it (scanning first if it has none)."""
        with self._lock:
            return self._current(root)

    def _current(self, root: Path) -> Usage:
        if self._usage is None:
            self._usage = scan(root)
        return Usage(self._usage.bytes, self._usage.files)

    @contextlib.contextmanager
    def change(self, root: Path) -> Iterator[Change]:
        with self._lock:
            change = Change(self.limits, self._current(root))
            try:
                yield change
            except BaseException:
                if change.charged:
                    self._usage = None  # it may have done part of its work: count again
                raise
            if self._usage is not None:
                self._usage.bytes += change.bytes
                self._usage.files += change.files
