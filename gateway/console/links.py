"""Where the console's things are: its base path, its own files, and the links a rendered
timeline gives its pictures (the console's routes, or an archive's files)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

STATIC = Path(__file__).resolve().parent / "static"
BASE = "/console"


@dataclass(frozen=True)
class Links:
    """Where a rendered timeline's pictures are: the console's routes, or an archive's files."""

    artifact: Callable[[str], str]


def console_links(task_id: str) -> Links:
    tid = quote(task_id, safe="")
    return Links(
        artifact=lambda art: f"{BASE}/tasks/{tid}/artifacts/{quote(art, safe='')}",
    )


def video_link(task_id: str, artifact_id: str) -> str:
    """Where the console serves a video of the task browser."""
    tid, art = quote(task_id, safe=""), quote(artifact_id, safe="")
    return f"{BASE}/tasks/{tid}/videos/{art}/video.webm"
