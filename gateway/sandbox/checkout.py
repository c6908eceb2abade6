"""A commit of a registered repository, written out as plain files, and its digest.

The files are the commit's blobs exactly as git stores them (`commit_tree.py`: no
checkout filter, end-of-line conversion or `export-ignore` attribute of the repository
applies, and a tree with a path that could leave the checkout is refused). Every folder is
made and opened relative to its parent without following a link, so nothing is written
outside it. A commit holding more than a budget of bytes or files is refused before
anything is written; blobs are streamed from git to their files, never held whole.

The digest (`sha256`) covers what was written: for each entry, sorted by path, one line
`<kind> <mode> <sha256 of its content or link target> <path>`, where kind is `file`,
`link` or `submodule` (a submodule is an empty folder; its content is not the commit's).
`tree_digest` computes the same from a folder on disk, so a checkout can be checked again
later; the git tree id is recorded beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gateway.core.sandbox_spec import DEFAULT_BUDGETS

from .commit_tree import Blobs, Entry, list_entries, resolve_commit
from .errors import SandboxRefused
from .tree import remove as remove_tree

# What one checkout may hold at most (`Budgets`: why; a provider passes its own).
MAX_CHECKOUT_BYTES = DEFAULT_BUDGETS.checkout_bytes
MAX_CHECKOUT_FILES = DEFAULT_BUDGETS.checkout_files
# A link's target is a path: longer than PATH_MAX, it is not one.
MAX_LINK_BYTES = 4095


@dataclass(frozen=True)
class Checkout:
    commit: str  # the full commit id
    tree: str  # git's id of the commit's tree
    sha256: str  # over the files written (module docstring)
    files: int
    bytes: int

    def public(self) -> dict[str, object]:
        return {"tree": self.tree, "sha256": self.sha256, "files": self.files, "bytes": self.bytes}


def extract(
    repository: Path,
    commit: str,
    dest: Path,
    *,
    max_bytes: int = MAX_CHECKOUT_BYTES,
    max_files: int = MAX_CHECKOUT_FILES,
) -> Checkout:
    """Write `commit` of `repository` into the empty folder `dest`; on any failure, what was
    written is removed again (`dest` itself stays, empty)."""
    full, tree = resolve_commit(repository, commit)
    entries = list_entries(repository, full, max_files)
    total = sum(e.size for e in entries if e.mode != "120000")
    if total > max_bytes:
        raise SandboxRefused(
            f"the commit's files hold {total} bytes, more than the {max_bytes} a sandbox's "
            "checkout may have",
            field="commit",
            max_bytes=max_bytes,
        )
    try:
        digest = _write(repository, entries, dest)
    except BaseException:
        _empty(dest)
        raise
    return Checkout(full, tree, digest, len(entries), total)


def _write(repository: Path, entries: list[Entry], dest: Path) -> str:
    """Write the entries (sorted by path) below `dest`, and return their digest.

    Every folder is made and opened relative to its parent's descriptor, with O_NOFOLLOW:
    a link already written (or anything else on disk) can never turn a later path into
    one outside `dest`, whatever the tree holds.
    """
    digest = hashlib.sha256()
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    # The open folders of the current entry's path: entries are sorted by path, so those of
    # one folder come together and a folder is never opened twice.
    stack: list[tuple[str, int]] = [("", root)]
    try:
        with Blobs(repository) as blobs:
            for entry in entries:
                *folders, name = entry.path.split("/")
                parent = _enter(stack, folders)
                if entry.mode == "160000":
                    os.mkdir(name, 0o755, dir_fd=parent)
                    line = f"submodule {entry.mode} - {entry.path}"
                elif entry.mode == "120000":
                    if entry.size > MAX_LINK_BYTES:
                        raise SandboxRefused(
                            f"the link {entry.path[:200]!r} is longer than a path can be",
                            field="commit",
                        )
                    target = blobs.read(entry.oid, entry.size)
                    os.symlink(target, name, dir_fd=parent)
                    line = f"link {entry.mode} {hashlib.sha256(target).hexdigest()} {entry.path}"
                else:
                    mode = 0o755 if entry.mode == "100755" else 0o644
                    fd = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        mode,
                        dir_fd=parent,
                    )
                    with os.fdopen(fd, "wb") as fh:
                        content = blobs.copy(entry.oid, entry.size, fh)
                        os.fchmod(fh.fileno(), mode)
                    line = f"file {_file_mode(entry.mode)} {content} {entry.path}"
                digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    finally:
        for _name, fd in stack:
            os.close(fd)
    return digest.hexdigest()


def _enter(stack: list[tuple[str, int]], folders: list[str]) -> int:
    """The descriptor of the folder `folders` (made as needed, never through a link)."""
    path = "/".join(folders)
    while len(stack) > 1 and not (path + "/").startswith(stack[-1][0] + "/"):
        os.close(stack.pop()[1])
    for depth in range(len(stack) - 1, len(folders)):
        name = folders[depth]
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=stack[-1][1])
        try:
            fd = os.open(
                name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=stack[-1][1],
            )
        except OSError:
            # A link or a file where a folder is needed: refused above already; never
            # written through, whatever slipped by.
            raise SandboxRefused(
                f"the commit's tree writes below {'/'.join(folders[: depth + 1])[:200]!r}, "
                "which is not a folder",
                field="commit",
            ) from None
        stack.append(("/".join(folders[: depth + 1]), fd))
    return stack[-1][1]


def _empty(dest: Path) -> None:
    """Remove everything below `dest`, never following a link."""
    with contextlib.suppress(OSError):
        for child in os.listdir(dest):
            with contextlib.suppress(OSError):
                remove_tree(dest / child)


def _file_mode(mode: str) -> str:
    return "100755" if mode == "100755" else "100644"


def tree_digest(root: Path) -> str:
    """The digest of a checkout as it is on disk now (the same lines as `extract`)."""
    lines: list[bytes] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = os.fsencode(os.readlink(path))
                text = f"link 120000 {hashlib.sha256(target).hexdigest()} {rel}"
            elif stat.S_ISDIR(info.st_mode):
                if os.listdir(path):
                    continue  # a folder is implied by its entries; an empty one is a submodule
                text = f"submodule 160000 - {rel}"
            else:
                mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
                text = f"file {mode} {hashlib.sha256(path.read_bytes()).hexdigest()} {rel}"
            lines.append(text.encode("utf-8", "surrogateescape"))
    lines.sort(key=lambda b: b.split(b" ", 3)[3])
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line + b"\n")
    return digest.hexdigest()
