"""The data dir is the gateway's alone: folders 0700, files 0600, written whole or not at all.

It holds the signing and control keys, the database (tokens' task identities, evidence),
artifacts and task workspaces; nobody else on the machine (the task browser's own user
included) has any business reading it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` and its missing parents created 0700; `path` itself made 0700 if it was not."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=DIR_MODE)
        os.chmod(folder, DIR_MODE)  # mkdir's mode passes through the umask
    os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """`path` exists and is 0600 (created empty if missing), before anyone writes to it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
    os.chmod(path, FILE_MODE)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write `path` atomically (a 0600 temporary file, synced, then renamed over it)."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
