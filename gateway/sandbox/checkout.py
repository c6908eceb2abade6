"""A commit of a registered repository, written out as plain files, and its digest.

The files are the commit's blobs exactly as git stores them, read with `git cat-file`:
no checkout filter, end-of-line conversion or `export-ignore` attribute of the repository
applies, so what the app runs is what the commit holds. A tree with a path that could
leave the checkout (`..`, an absolute path, a `.git` entry, a path listed twice, or one
below a link or a file of the same tree) is refused, and every folder is made and opened
relative to its parent without following a link, so nothing is written outside it. A
commit holding more than a budget of bytes or files is refused before anything is written;
blobs are streamed from git to their files, never held whole.

The digest (`sha256`) covers what was written: for each entry, sorted by path, one line
`<kind> <mode> <sha256 of its content or link target> <path>`, where kind is `file`,
`link` or `submodule` (a submodule is an empty folder; its content is not the commit's).
`tree_digest` computes the same from a folder on disk, so a checkout can be checked again
later; the git tree id is recorded beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gateway.core.sandbox_spec import DEFAULT_BUDGETS

from .errors import SandboxError, SandboxRefused, UnknownCommit
from .tree import remove as remove_tree

GIT_TIMEOUT_S = 60.0
# What one checkout may hold at most (`Budgets`: why; a provider passes its own).
MAX_CHECKOUT_BYTES = DEFAULT_BUDGETS.checkout_bytes
MAX_CHECKOUT_FILES = DEFAULT_BUDGETS.checkout_files
# A link's target is a path: longer than PATH_MAX, it is not one.
MAX_LINK_BYTES = 4095
# Folders deep a path of the commit may be: `git ls-tree -r` lists leaves only, so a
# chain of folders counts as one file, and whatever walks or removes the checkout later
# goes as deep.
MAX_CHECKOUT_DEPTH = 64
# git reads nothing of the caller's environment that could point it elsewhere.
_GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "HOME": "/nonexistent",
    "LC_ALL": "C",
}


@dataclass(frozen=True)
class Checkout:
    commit: str  # the full commit id
    tree: str  # git's id of the commit's tree
    sha256: str  # over the files written (module docstring)
    files: int
    bytes: int

    def public(self) -> dict[str, object]:
        return {"tree": self.tree, "sha256": self.sha256, "files": self.files, "bytes": self.bytes}


def _git(repository: Path, *args: str) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(repository), *args],
        capture_output=True,
        env=_GIT_ENV,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout


def resolve_commit(repository: Path, commit: str) -> tuple[str, str]:
    """The full id of `commit` (hex, checked by the spec) and of its tree.

    git reads a name shorter than a full id as a ref first: a branch or tag named like
    the abbreviation asked for would win over the commit it abbreviates. What resolved
    must start with what was asked, or it is refused.
    """
    try:
        full = (
            _git(repository, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
            .decode()
            .strip()
        )
        if not full.startswith(commit):
            raise UnknownCommit(
                f"commit {commit} is ambiguous in the registered repository: it names a "
                "ref, not a commit whose id starts so; ask for the full id"
            )
        tree = _git(repository, "rev-parse", "--verify", "--quiet", f"{full}^{{tree}}")
    except subprocess.CalledProcessError:
        raise UnknownCommit(
            f"commit {commit} is not in the registered repository (or is ambiguous)"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"the registered repository cannot be read: {exc}") from None
    return full, tree.decode().strip()


def _safe(path: bytes) -> str:
    text = path.decode("utf-8", "surrogateescape")
    parts = text.split("/")
    if text.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise SandboxRefused(
            f"the commit's tree holds a path that would leave the checkout: {text[:200]!r}",
            field="commit",
        )
    return text


@dataclass(frozen=True)
class _Entry:
    mode: str
    oid: str  # "" for a submodule: its commit is not in this repository
    size: int
    path: str


def _list(repository: Path, commit: str, max_files: int) -> list[_Entry]:
    """The commit's entries, sorted by path; refused when one could write through another.

    `git ls-tree -r` lists leaves only (files, links, submodules). A crafted tree (`git
    mktree` takes duplicate names) can hold the same path twice, or a link `a` beside a
    folder `a` holding `a/x`: written in order, `a/x` would land wherever the link points.
    So no path may repeat and no leaf may be the folder of another; the writing below
    refuses to follow a link anyway, this says why in the answer.
    """
    entries: list[_Entry] = []
    with subprocess.Popen(
        ["git", "-C", str(repository), "ls-tree", "-r", "-l", "-z", "--full-tree", commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_GIT_ENV,
    ) as git:
        assert git.stdout is not None
        pending = b""
        try:
            # Read as it comes: a tree of millions of entries is refused at the budget,
            # not held whole in memory first.
            while chunk := git.stdout.read(1 << 16):
                *records, pending = (pending + chunk).split(b"\0")
                for record in records:
                    entries.append(_entry(record))
                    if len(entries) > max_files:
                        raise SandboxRefused(
                            f"the commit holds more than {max_files} files, the most a "
                            "sandbox's checkout may have",
                            field="commit",
                            max_files=max_files,
                        )
        except BaseException:
            git.kill()
            raise
        if git.wait(GIT_TIMEOUT_S) != 0 or pending:
            raise SandboxError("the commit's tree could not be listed")
    entries.sort(key=lambda e: e.path.encode("utf-8", "surrogateescape"))
    leaves = {e.path for e in entries}
    if len(leaves) != len(entries):
        # Sorted: a path listed twice is next to itself.
        twice = next(a.path for a, b in itertools.pairwise(entries) if a.path == b.path)
        raise SandboxRefused(
            f"the commit's tree holds the path {twice[:200]!r} twice", field="commit"
        )
    for e in entries:
        parts = e.path.split("/")
        if len(parts) - 1 > MAX_CHECKOUT_DEPTH:
            raise SandboxRefused(
                f"the commit's tree holds {e.path[:200]!r}, deeper than the "
                f"{MAX_CHECKOUT_DEPTH} folders a sandbox's checkout may have",
                field="commit",
                max_depth=MAX_CHECKOUT_DEPTH,
            )
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if above in leaves:
                raise SandboxRefused(
                    f"the commit's tree holds {e.path[:200]!r} under {above[:200]!r}, which "
                    "is not a folder (a link or a file): it would be written elsewhere",
                    field="commit",
                )
    return entries


def _entry(record: bytes) -> _Entry:
    head, _, raw_path = record.partition(b"\t")
    mode, kind, oid, size = head.decode().split()
    if kind == "commit":
        return _Entry(mode, "", 0, _safe(raw_path))
    if kind != "blob":
        raise SandboxError(f"the commit's tree holds an unexpected {kind} entry")
    return _Entry(mode, oid, int(size), _safe(raw_path))


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
    entries = _list(repository, full, max_files)
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


def _write(repository: Path, entries: list[_Entry], dest: Path) -> str:
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
        with _Blobs(repository) as blobs:
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


class _Blobs:
    """One `git cat-file --batch` asked for one object at a time, each streamed out as it
    is read: a large commit never sits in memory whole."""

    def __init__(self, repository: Path) -> None:
        self._git = subprocess.Popen(
            ["git", "-C", str(repository), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_GIT_ENV,
        )

    def __enter__(self) -> _Blobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._git.kill()
        self._git.wait(GIT_TIMEOUT_S)
        for pipe in (self._git.stdin, self._git.stdout):
            if pipe is not None:
                pipe.close()

    def _open(self, oid: str, size: int) -> None:
        stdin, stdout = self._git.stdin, self._git.stdout
        assert stdin is not None
        assert stdout is not None
        # Without --buffer, git answers each line before reading the next one.
        stdin.write(oid.encode() + b"\n")
        stdin.flush()
        header = stdout.readline().decode().split()
        if header != [oid, "blob", str(size)]:
            raise SandboxError(f"object {oid} of the commit could not be read")

    def _chunks(self, size: int) -> Iterator[bytes]:
        stdout = self._git.stdout
        assert stdout is not None
        left = size
        while left:
            chunk = stdout.read(min(left, 1 << 20))
            if not chunk:
                raise SandboxError("git stopped in the middle of an object of the commit")
            left -= len(chunk)
            yield chunk
        if stdout.read(1) != b"\n":
            raise SandboxError("git's answer for an object of the commit was malformed")

    def read(self, oid: str, size: int) -> bytes:
        self._open(oid, size)
        return b"".join(self._chunks(size))

    def copy(self, oid: str, size: int, out: BinaryIO) -> str:
        """Write the blob to `out`; its sha256."""
        self._open(oid, size)
        digest = hashlib.sha256()
        for chunk in self._chunks(size):
            digest.update(chunk)
            out.write(chunk)
        return digest.hexdigest()


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
