"""A commit of a registered repository as git holds it: its id resolved, its tree listed,
its blobs read.

Everything is read with git's plumbing (`rev-parse`, `ls-tree`, `cat-file`), with an
environment of its own so nothing of the caller's points git elsewhere: no checkout
filter, end-of-line conversion or `export-ignore` attribute of the repository applies, so
what the app runs is what the commit holds. A tree with a path that could leave the
checkout (`..`, an absolute path, a `.git` entry, a path listed twice, or one below a link
or a file of the same tree) is refused as it is listed, and a tree of more entries than a
budget is refused before it is read whole.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import SandboxError, SandboxRefused, UnknownCommit

GIT_TIMEOUT_S = 60.0
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
class Entry:
    mode: str
    oid: str  # "" for a submodule: its commit is not in this repository
    size: int
    path: str


def list_entries(repository: Path, commit: str, max_files: int) -> list[Entry]:
    """The commit's entries, sorted by path; refused when one could write through another.

    `git ls-tree -r` lists leaves only (files, links, submodules). A crafted tree (`git
    mktree` takes duplicate names) can hold the same path twice, or a link `a` beside a
    folder `a` holding `a/x`: written in order, `a/x` would land wherever the link points.
    So no path may repeat and no leaf may be the folder of another; the writing below
    refuses to follow a link anyway, this says why in the answer.
    """
    entries: list[Entry] = []
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


def _entry(record: bytes) -> Entry:
    head, _, raw_path = record.partition(b"\t")
    mode, kind, oid, size = head.decode().split()
    if kind == "commit":
        return Entry(mode, "", 0, _safe(raw_path))
    if kind != "blob":
        raise SandboxError(f"the commit's tree holds an unexpected {kind} entry")
    return Entry(mode, oid, int(size), _safe(raw_path))


class Blobs:
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

    def __enter__(self) -> Blobs:
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
