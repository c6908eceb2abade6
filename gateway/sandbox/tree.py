"""Walking and removing a folder an app wrote, at any depth, without following a link.

An app decides how deep its folders go. `os.fwalk` and `shutil.rmtree` recurse (on Python
3.11 both do, one frame per level), so a chain of a few thousand folders raises
`RecursionError` in the gateway, which no `except OSError` catches. Both here loop
instead:

- `walk` holds one descriptor per level of the folder it is in and goes no deeper than
  `max_depth` (it reports what it left out), so its descriptors are bounded too;
- `remove` holds one descriptor whatever the depth: it goes down by name relative to the
  folder it holds, and back up through `..`, checked to be the folder it came from.

Each folder is opened relative to its parent with `O_NOFOLLOW`, so a link swapped in for
a folder leads nowhere else, and neither crosses into another filesystem (a mount below
the folder is left alone: `remove` then fails on it with `OSError`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Folder:
    """One folder `walk` is in: its path below the top (`""` for the top), a descriptor
    valid until the walk moves on, and its entries' names."""

    path: str
    fd: int
    dirs: list[str]
    files: list[str]


@dataclass
class Walk:
    """What `walk` left out: folders below `max_depth`, and entries it could not open."""

    too_deep: list[str] = field(default_factory=list)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether the entry is a folder itself, not a link to one; one that cannot be looked
    at is taken for a file."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _entries(fd: int) -> tuple[list[str], list[str]]:
    dirs: list[str] = []
    files: list[str] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            (dirs if _is_dir(entry) else files).append(entry.name)
    return sorted(dirs), sorted(files)


def walk(top: Path, max_depth: int, outcome: Walk | None = None) -> Generator[Folder, None, None]:
    """Every folder below `top` (itself first), parents before their children, at most
    `max_depth` levels below it; never through a link or into another filesystem."""
    outcome = outcome if outcome is not None else Walk()
    root = os.open(top, DIR_NOFOLLOW)
    # (path, descriptor, the names of its folders not visited yet)
    stack: list[tuple[str, int, list[str]]] = [("", root, [])]
    try:
        device = os.fstat(root).st_dev
        dirs, files = _entries(root)
        stack[0][2].extend(reversed(dirs))
        yield Folder("", root, dirs, files)
        while stack:
            path, fd, pending = stack[-1]
            if not pending:
                stack.pop()
                os.close(fd)
                continue
            name = pending.pop()
            child = f"{path}/{name}" if path else name
            if len(stack) > max_depth:
                outcome.too_deep.append(child)
                continue
            try:
                sub = os.open(name, DIR_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link or a file
            try:
                if os.fstat(sub).st_dev != device:
                    os.close(sub)
                    continue
                dirs, files = _entries(sub)
            except OSError:
                os.close(sub)
                continue
            stack.append((child, sub, list(reversed(dirs))))
            yield Folder(child, sub, dirs, files)
    finally:
        for _path, fd, _pending in stack:
            with contextlib.suppress(OSError):
                os.close(fd)


def remove(path: Path) -> None:
    """Remove `path` and everything below it, at any depth (nothing when it is not there).
    Raises `OSError` when something could not be removed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        path.unlink()
        return
    parent = os.open(path.parent, DIR_NOFOLLOW)
    try:
        _empty(parent, path.name)
        os.rmdir(path.name, dir_fd=parent)
    finally:
        os.close(parent)


def _empty(parent: int, name: str) -> None:
    """Empty the folder `name` of the folder `parent`, one descriptor held at a time."""
    fd = os.open(name, DIR_NOFOLLOW, dir_fd=parent)
    device = os.fstat(fd).st_dev
    # The folders above the one held, from the top down: (name in its parent, dev, inode
    # of that parent), to check the way back up is the way it came down.
    trail: list[tuple[str, int, int]] = []
    try:
        while True:
            below = _clear_files(fd)
            if below is not None:
                try:
                    sub = os.open(below, DIR_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        os.unlink(below, dir_fd=fd)  # swapped for a link or a file
                    elif exc.errno != errno.ENOENT:
                        raise
                    continue
                here = os.fstat(fd)
                if os.fstat(sub).st_dev != device:
                    os.close(sub)
                    raise OSError(errno.EBUSY, "another filesystem is mounted here", below)
                trail.append((below, here.st_dev, here.st_ino))
                os.close(fd)
                fd = sub
                continue
            if not trail:
                return
            done, dev, ino = trail.pop()
            up = os.open("..", DIR_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = up
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (dev, ino):
                raise OSError(errno.ESTALE, "a folder moved while it was removed", done)
            os.rmdir(done, dir_fd=fd)
    finally:
        os.close(fd)


def _clear_files(fd: int) -> str | None:
    """Unlink every entry of the folder `fd` but folders; the name of one folder left in
    it, or None when it is empty."""
    while True:
        unlinked = False
        with os.scandir(fd) as listing:
            for entry in listing:
                if _is_dir(entry):
                    return entry.name
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
                unlinked = True
        if not unlinked:
            return None
