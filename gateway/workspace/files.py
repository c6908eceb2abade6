"""The four workspace operations on a `Workspace`: read, search, write, edit.

Plain blocking functions (the tools run them in a worker thread). Every path goes through
`split_path` and descriptor-relative opens, results name files by their workspace-relative
path only (never a host path), and every size is bounded. A write or edit is charged
against the workspace's quota (`quota.py`) before it changes anything on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import ToolFailure
from gateway.core.results import ErrorCode, ToolStatus
from gateway.workspace.paths import Workspace, forbidden, not_found, split_path
from gateway.workspace.quota import Change, unlimited

READ_MAX_BYTES = 256 * 1024
WRITE_MAX_BYTES = 192 * 1024
EDIT_MAX_FILE_BYTES = 1024 * 1024
SEARCH_MAX_FILE_BYTES = 1024 * 1024
SEARCH_MAX_FILES = 2000
SEARCH_MAX_RESULTS = 500
SEARCH_LINE_CHARS = 400


def _display(parts: list[str]) -> str:
    return "/".join(parts) or "."


def _changing(ws: Workspace) -> contextlib.AbstractContextManager[Change]:
    """The workspace's quota held for one change (none for a workspace without one)."""
    if ws.quota is None:
        return contextlib.nullcontext(unlimited())
    return ws.quota.change(ws.root)


def _conflict(message: str) -> ToolFailure:
    return ToolFailure(ToolStatus.FAILED, ErrorCode.CONFLICT, message)


def _read_all(fd: int, limit: int, display: str) -> bytes:
    size = os.fstat(fd).st_size
    if size > limit:
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"{display!r} is {size} bytes; at most {limit} can be handled here",
        )
    with os.fdopen(os.dup(fd), "rb") as fh:
        return fh.read(limit + 1)[:limit]


def read(ws: Workspace, path: str, offset: int = 0, limit: int = READ_MAX_BYTES) -> dict[str, Any]:
    parts = split_path(path)
    display = _display(parts)
    limit = max(1, min(limit, READ_MAX_BYTES))
    with ws.directory(parts[:-1]) as dir_fd:
        fd = Workspace.open_file(dir_fd, parts[-1], os.O_RDONLY, display)
        try:
            digest = hashlib.sha256()
            with os.fdopen(os.dup(fd), "rb") as fh:
                for block in iter(lambda: fh.read(64 * 1024), b""):
                    digest.update(block)
                fh.seek(offset)
                chunk = fh.read(limit + 1)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
    data = chunk[:limit]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # A cut through a multi-byte character at the limit is not an encoding error.
        text = data.decode("utf-8", errors="ignore")
        if len(text.encode()) < len(data) - 3:
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.INVALID_INPUT, f"{display!r} is not UTF-8 text"
            ) from None
    return {
        "path": display,
        "contents": text,
        "size": size,
        "offset": offset,
        "truncated": len(chunk) > limit,
        "sha256": digest.hexdigest(),
    }


def _replaceable(existing: os.stat_result | None, display: str) -> None:
    if existing is not None and (not stat.S_ISREG(existing.st_mode) or existing.st_nlink > 1):
        raise forbidden(f"{display!r} is not a regular file of the workspace")


def _replace_file(dir_fd: int, name: str, data: bytes, display: str) -> bool:
    """Write `data` as `name` atomically (temp file, fsync, rename); True if it is new."""
    try:
        existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    _replaceable(existing, display)
    tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return existing is None


def write(ws: Workspace, path: str, contents: str, create_dirs: bool = True) -> dict[str, Any]:
    parts = split_path(path)
    display = _display(parts)
    data = contents.encode()
    if len(data) > WRITE_MAX_BYTES:
        raise ToolFailure(
            ToolStatus.FAILED,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"contents are {len(data)} bytes; at most {WRITE_MAX_BYTES}",
        )
    with _changing(ws) as change:
        missing_dirs, existing = ws.probe(parts)
        if missing_dirs and not create_dirs:
            raise not_found(_display(parts[:-1]))
        _replaceable(existing, display)
        change.charge(
            f"writing {len(data)} bytes to {display!r}",
            add_bytes=len(data) - (existing.st_size if existing is not None else 0),
            add_files=missing_dirs + (1 if existing is None else 0),
        )
        with ws.directory(parts[:-1], create=create_dirs) as dir_fd:
            created = _replace_file(dir_fd, parts[-1], data, display)
    return {
        "path": display,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "created": created,
    }


def edit(
    ws: Workspace,
    path: str,
    old: str,
    new: str,
    replace_all: bool = False,
    expected_sha256: str | None = None,
) -> dict[str, Any]:
    parts = split_path(path)
    display = _display(parts)
    # One change from the read to the rename: the size it charges is the one it replaces.
    with _changing(ws) as change, ws.directory(parts[:-1]) as dir_fd:
        fd = Workspace.open_file(dir_fd, parts[-1], os.O_RDONLY, display)
        try:
            data = _read_all(fd, EDIT_MAX_FILE_BYTES, display)
        finally:
            os.close(fd)
        if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
            raise _conflict(f"{display!r} changed since it was read (sha256 differs)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.INVALID_INPUT, f"{display!r} is not UTF-8 text"
            ) from None
        count = text.count(old)
        if count == 0:
            raise _conflict(f"the text to replace does not occur in {display!r}")
        if count > 1 and not replace_all:
            raise _conflict(
                f"the text to replace occurs {count} times in {display!r}; "
                "make it unique or set replace_all"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        out = updated.encode()
        if len(out) > EDIT_MAX_FILE_BYTES:
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.PAYLOAD_TOO_LARGE, "the edited file is too large"
            )
        change.charge(
            f"editing {display!r} from {len(data)} to {len(out)} bytes",
            add_bytes=len(out) - len(data),
            add_files=0,
        )
        _replace_file(dir_fd, parts[-1], out, display)
    return {
        "path": display,
        "replacements": count if replace_all else 1,
        "size": len(out),
        "sha256": hashlib.sha256(out).hexdigest(),
    }


@dataclass
class _Search:
    query: str
    case_sensitive: bool
    max_results: int
    matches: list[dict[str, Any]]
    files_scanned: int = 0
    truncated: bool = False

    def scan(self, rel: str, data: bytes) -> None:
        if b"\x00" in data[:8192]:
            return  # binary
        needle = self.query if self.case_sensitive else self.query.casefold()
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            hay = line if self.case_sensitive else line.casefold()
            column = hay.find(needle)
            if column < 0:
                continue
            if len(self.matches) >= self.max_results:
                self.truncated = True
                return
            self.matches.append(
                {
                    "path": rel,
                    "line": number,
                    "column": column + 1,
                    "text": line[:SEARCH_LINE_CHARS],
                }
            )


def search(
    ws: Workspace,
    query: str,
    path: str = ".",
    max_results: int = 100,
    case_sensitive: bool = True,
) -> dict[str, Any]:
    parts = split_path(path, allow_root=True)
    state = _Search(query, case_sensitive, max(1, min(max_results, SEARCH_MAX_RESULTS)), [])
    with ws.directory(parts) as top:
        # fwalk with follow_symlinks=False never descends a linked directory; files are
        # opened with O_NOFOLLOW too, so a link is skipped rather than followed.
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(
            ".", dir_fd=top, follow_symlinks=False
        ):
            dirnames.sort()
            for name in sorted(filenames):
                if state.files_scanned >= SEARCH_MAX_FILES or state.truncated:
                    state.truncated = True
                    return _search_result(state)
                rel = "/".join([*parts, *[p for p in dirpath.split("/") if p != "."], name])
                try:
                    fd = Workspace.open_file(dir_fd, name, os.O_RDONLY, rel)
                except ToolFailure:
                    continue
                try:
                    if os.fstat(fd).st_size > SEARCH_MAX_FILE_BYTES:
                        continue
                    with os.fdopen(os.dup(fd), "rb") as fh:
                        data = fh.read(SEARCH_MAX_FILE_BYTES)
                finally:
                    os.close(fd)
                state.files_scanned += 1
                state.scan(rel, data)
    return _search_result(state)


def _search_result(state: _Search) -> dict[str, Any]:
    return {
        "matches": state.matches,
        "files_scanned": state.files_scanned,
        "truncated": state.truncated,
    }
