"""A commit of a registered repository, written out as plain files, and its digest.

The files are the commit's blobs exactly as git stores them, read with `git cat-file`:
no checkout filter, end-of-line conversion or `export-ignore` attribute of the repository
applies, so what the app runs is what the commit holds. A tree with a path that could
leave the checkout (`..`, an absolute path, a `.git` entry) is refused.

The digest (`sha256`) covers what was written: for each entry, sorted by path, one line
`<kind> <mode> <sha256 of its content or link target> <path>`, where kind is `file`,
`link` or `submodule` (a submodule is an empty folder; its content is not the commit's).
`tree_digest` computes the same from a folder on disk, so a checkout can be checked again
later; the git tree id is recorded beside it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import SandboxError, SandboxRefused, UnknownCommit

GIT_TIMEOUT_S = 60.0
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


def _git(repository: Path, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(repository), *args],
        input=stdin,
        capture_output=True,
        env=_GIT_ENV,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout


def resolve_commit(repository: Path, commit: str) -> tuple[str, str]:
    """The full id of `commit` (hex, checked by the spec) and of its tree."""
    try:
        full = _git(repository, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        tree = _git(repository, "rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}")
    except subprocess.CalledProcessError:
        raise UnknownCommit(
            f"commit {commit} is not in the registered repository (or is ambiguous)"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"the registered repository cannot be read: {exc}") from None
    return full.decode().strip(), tree.decode().strip()


def _safe(path: bytes) -> str:
    text = path.decode("utf-8", "surrogateescape")
    parts = text.split("/")
    if text.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise SandboxRefused(
            f"the commit's tree holds a path that would leave the checkout: {text[:200]!r}",
            field="commit",
        )
    return text


def extract(repository: Path, commit: str, dest: Path) -> Checkout:
    """Write `commit` (a full id) of `repository` into the empty folder `dest`."""
    full, tree = resolve_commit(repository, commit)
    listing = _git(repository, "ls-tree", "-r", "-z", "--full-tree", full)
    entries: list[tuple[str, str, str]] = []  # (mode, object id, path)
    for record in listing.split(b"\0"):
        if not record:
            continue
        head, _, raw_path = record.partition(b"\t")
        mode, kind, oid = head.decode().split(" ")
        entries.append((mode, oid if kind != "commit" else "", _safe(raw_path)))
    entries.sort(key=lambda e: e[2].encode("utf-8", "surrogateescape"))
    wanted = [oid for mode, oid, _ in entries if oid]
    blobs = _read_blobs(repository, wanted)
    digest = hashlib.sha256()
    total = 0
    for mode, oid, path in entries:
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "160000":
            target.mkdir(exist_ok=True)
            line = f"submodule {mode} - {path}"
        elif mode == "120000":
            os.symlink(blobs[oid], target)
            line = f"link {mode} {hashlib.sha256(blobs[oid]).hexdigest()} {path}"
        else:
            data = blobs[oid]
            fd = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(target, 0o755 if mode == "100755" else 0o644)
            total += len(data)
            line = f"file {_file_mode(mode)} {hashlib.sha256(data).hexdigest()} {path}"
        digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return Checkout(full, tree, digest.hexdigest(), len(entries), total)


def _file_mode(mode: str) -> str:
    return "100755" if mode == "100755" else "100644"


def _read_blobs(repository: Path, oids: list[str]) -> dict[str, bytes]:
    """Every object asked for, in one `git cat-file --batch` run."""
    unique = list(dict.fromkeys(oids))
    out = _git(repository, "cat-file", "--batch", stdin=("\n".join(unique) + "\n").encode())
    blobs: dict[str, bytes] = {}
    at = 0
    for oid in unique:
        end = out.index(b"\n", at)
        header = out[at:end].decode().split(" ")
        if len(header) != 3 or header[1] != "blob":
            raise SandboxError(f"object {oid} of the commit could not be read")
        size = int(header[2])
        blobs[oid] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return blobs


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
