"""What a browser costs: its process tree and proportional memory (PSS), from /proc.

PSS splits shared pages between the processes that map them, so the sum over a browser's
processes is what that browser really adds to the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _parent_of(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is parenthesized and may itself hold spaces or parentheses.
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 else None


def process_tree(root: int) -> list[int]:
    """`root` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(PROC):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    tree, stack = [], [root]
    while stack:
        pid = stack.pop()
        if (PROC / str(pid)).exists():
            tree.append(pid)
            stack.extend(children.get(pid, ()))
    return tree


def renderers(root: int) -> list[int]:
    """The renderer processes among the live descendants of the browser process `root`."""
    # Looked for in the whole command line: Chromium's helpers may rewrite theirs into one
    # string, switches and all.
    return [pid for pid in process_tree(root) if "--type=renderer" in " ".join(command_line(pid))]


def pss_kib(pids: list[int]) -> int:
    """Sum of PSS over `pids`, in KiB; processes that are gone count zero."""
    total = 0
    for pid in pids:
        try:
            text = (PROC / str(pid) / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    return total


def command_line(pid: int) -> list[str]:
    """A process's arguments, or none when it is gone (or /proc is not there)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def find_browser_pid(marker: str) -> int | None:
    """The Chromium browser process launched with `marker` among its switches.

    Its helpers (renderers, GPU, zygotes) carry `--type=`; the browser process does not.
    """
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            argv = (PROC / entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and not any(a.startswith(b"--type=") for a in argv):
            return int(entry)
    return None
