"""The ffmpeg the task browser's Playwright records videos with.

Playwright's driver encodes a context's video (`record_video_dir`) with an `ffmpeg` it
looks up in its own registry of downloaded browsers: `ffmpeg-<revision>/ffmpeg-linux`
under `PLAYWRIGHT_BROWSERS_PATH` (the revision is the one its `browsers.json` names).
Where Playwright's own build cannot be downloaded, the distribution's ffmpeg does the same
work (it has libvpx, the webm encoder the driver asks for): the gateway keeps a browsers
folder of its own under its data folder, holding only a link to that ffmpeg, and hands it
to its driver alone (the gateway's Chromium is named by path, never looked up there).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

BROWSERS_PATH_ENV = "PLAYWRIGHT_BROWSERS_PATH"
FOLDER = "playwright-browsers"


@cache
def ffmpeg_revision() -> str | None:
    """The ffmpeg revision this playwright's driver looks for, or None if it names none."""
    try:
        import playwright
    except ImportError:
        return None
    listing = Path(playwright.__file__).resolve().parent / "driver" / "package" / "browsers.json"
    try:
        browsers = json.loads(listing.read_text())["browsers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for browser in browsers:
        if isinstance(browser, dict) and browser.get("name") == "ffmpeg":
            return str(browser.get("revision"))
    return None


def find_ffmpeg() -> Path | None:
    """The machine's ffmpeg (Debian's `/usr/bin/ffmpeg`), or None."""
    found = shutil.which("ffmpeg")
    return Path(found).resolve() if found else None


def browsers_path(data_dir: Path) -> Path | None:
    """A browsers folder whose `ffmpeg-<revision>/ffmpeg-linux` is the machine's ffmpeg,
    made (or mended) under `data_dir`; None when there is no ffmpeg to link to."""
    ffmpeg, revision = find_ffmpeg(), ffmpeg_revision()
    if ffmpeg is None or revision is None:
        return None
    root = data_dir.resolve() / FOLDER
    link = root / f"ffmpeg-{revision}" / "ffmpeg-linux"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and link.resolve() == ffmpeg):
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(ffmpeg)
    return root


@contextlib.contextmanager
def driver_environment(data_dir: Path) -> Iterator[None]:
    """While the driver starts (it copies the environment then), its browsers path is the
    gateway's own; a path the host set itself is left as it is."""
    if os.environ.get(BROWSERS_PATH_ENV):
        yield
        return
    try:
        root = browsers_path(data_dir)
    except OSError as exc:
        # The browser still starts; a task that asks for a video gets no browser, saying why.
        log.warning("no ffmpeg link for task browser videos under %s: %r", data_dir, exc)
        root = None
    if root is None:
        yield
        return
    os.environ[BROWSERS_PATH_ENV] = str(root)
    try:
        yield
    finally:
        os.environ.pop(BROWSERS_PATH_ENV, None)
