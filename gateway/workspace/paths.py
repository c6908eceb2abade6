"""The per-task workspace directory, and the only way to reach a file inside it.

A workspace path comes from a sandbox, so it is treated as hostile. It must be relative,
POSIX-separated, free of `..`, NUL and control characters, and bounded in length. It is
then opened one component at a time relative to the workspace's directory descriptor with
`O_NOFOLLOW`, so a symlink anywhere on the way (planted before the call or swapped in
during it) fails the open instead of leading out: no resolve-then-open race. Files with
more than one hard link are refused too, since a link can alias a file outside.

Every refusal is `denied`/`forbidden` (an escape attempt is an authorization question, and
the sandbox learns nothing about what lies outside); a path that is merely badly formed is
refused the same way, so probing by shape tells nothing either.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from gateway.core.errors import ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.private_files import private_dir
from gateway.core.results import ErrorCode, ToolStatus
from gateway.workspace.quota import Tally

MAX_PATH_CHARS = 1024
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 32

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def forbidden(message: str) -> ToolFailure:
    return ToolFailure(ToolStatus.DENIED, ErrorCode.FORBIDDEN, message)


def not_found(path: str) -> ToolFailure:
    return ToolFailure(ToolStatus.FAILED, ErrorCode.NOT_FOUND, f"no file at {path!r}")


def workspace_dir(data_dir: Path, identity: TaskIdentity) -> Path:
    """`<data_dir>/workspaces/o_<org>/<task>`: the prefix keeps `.`/`..` orgs harmless."""
    return data_dir / "workspaces" / f"o_{identity.org_id}" / identity.task_id


def split_path(path: str, *, allow_root: bool = False) -> list[str]:
    """The components of a workspace-relative path, or `forbidden` for anything else."""
    if not isinstance(path, str) or len(path) > MAX_PATH_CHARS:
        raise forbidden("a workspace path is a relative path of at most 1024 characters")
    if not path.isascii():
        try:
            path.encode()
        except UnicodeEncodeError:  # a lone surrogate names no file
            raise forbidden("a workspace path must be valid Unicode") from None
    if _CONTROL.search(path):
        raise forbidden("a workspace path may not contain NUL or control characters")
    if path.startswith(("/", "\\", "~")) or _DRIVE.match(path):
        raise forbidden("a workspace path must be relative to the workspace")
    if "\\" in path:
        raise forbidden("a workspace path uses '/' as its only separator")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise forbidden("a workspace path may not contain '..'")
    if any(len(p.encode()) > MAX_COMPONENT_BYTES for p in parts) or len(parts) > MAX_DEPTH:
        raise forbidden("a workspace path is too long or too deep")
    if not parts and not allow_root:
        raise forbidden("a workspace path must name a file")
    return parts


class Workspace:
    """One task's directory; every method takes a hostile relative path. `quota`, when
    given, is the workspace's tally that every write and edit is charged against."""

    def __init__(self, root: Path, quota: Tally | None = None) -> None:
        self.root = root
        self.quota = quota

    def ensure(self) -> None:
        if not self.root.is_dir():
            private_dir(self.root)

    @contextlib.contextmanager
    def _root_fd(self) -> Iterator[int]:
        self.ensure()
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def directory(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory `parts`, walked without following any symlink."""
        with self._root_fd() as root:
            fd = os.dup(root)
            try:
                for part in parts:
                    fd = self._step(fd, part, create)
                yield fd
            finally:
                os.close(fd)

    def probe(self, parts: list[str]) -> tuple[int, os.stat_result | None]:
        """What writing the file `parts` would add, found without creating anything: how
        many of its directories are missing, and the file as it is (None if absent)."""
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except FileNotFoundError:
            return len(parts) - 1, None
        try:
            for depth, part in enumerate(parts[:-1]):
                try:
                    fd = self._step(fd, part, create=False)
                except ToolFailure as exc:
                    if exc.code != ErrorCode.NOT_FOUND:
                        raise
                    return len(parts) - 1 - depth, None
            try:
                return 0, os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return 0, None
        finally:
            os.close(fd)

    @staticmethod
    def _step(fd: int, part: str, create: bool) -> int:
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise not_found(part) from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise forbidden("a workspace path leads through a link or a file") from exc
        except OSError as exc:
            # ELOOP (a symlink) or ENOTDIR (a file): neither may be walked through.
            raise forbidden("a workspace path leads through a link or a file") from exc
        os.close(fd)
        return child

    @staticmethod
    def open_file(dir_fd: int, name: str, flags: int, display: str) -> int:
        """Open `name` in `dir_fd` without following a symlink; only regular files."""
        try:
            fd = os.open(
                name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600, dir_fd=dir_fd
            )
        except FileNotFoundError:
            raise not_found(display) from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                raise forbidden(f"{display!r} is not a regular file of the workspace") from exc
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(fd)
            raise forbidden(f"{display!r} is not a regular file of the workspace")
        return fd
