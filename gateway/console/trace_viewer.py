"""Playwright's trace viewer, served from the gateway itself.

The playwright package ships the viewer's built files with its driver
(`driver/package/lib/vite/traceViewer`): a page, its scripts and a service worker that
reads a trace zip from a URL given as `?trace=`. The console serves those files under its
own path and behind its own sign-in, and hands the viewer the console's URL of a task's
trace, so nothing loads from another site and the service worker's fetch of the trace
carries the console's cookie (same origin).
"""

from __future__ import annotations

import mimetypes
from functools import cache
from pathlib import Path

from starlette.responses import FileResponse, Response

from gateway.core.errors import NotFound

# Where the files are inside the playwright package, newest layout first.
_LAYOUTS = (
    ("driver", "package", "lib", "vite", "traceViewer"),
    ("driver", "package", "lib", "webpack", "traceViewer"),
)
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ttf": "font/ttf",
    ".webmanifest": "application/manifest+json",
    ".wasm": "application/wasm",
}


WORKER = "sw.bundle.js"
# The viewer's pages load their own files only (its fallback notice is an inline script, its
# components set inline styles); the recorded pages it shows come from the trace, through
# its worker, with their scripts and event handlers left out by Playwright's renderer.
VIEWER_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "frame-src 'self' blob:; worker-src 'self'; frame-ancestors 'self'; base-uri 'self'"
)
WORKER_POLICY = "default-src 'self'; connect-src 'self'"


@cache
def viewer_dir() -> Path | None:
    """The folder of the viewer's files, or None if this playwright has none."""
    try:
        import playwright
    except ImportError:
        return None
    root = Path(playwright.__file__).resolve().parent
    for parts in _LAYOUTS:
        folder = root.joinpath(*parts)
        if (folder / "index.html").is_file() and (folder / WORKER).is_file():
            return folder
    return None


def viewer_file(relative: str) -> Response:
    """One of the viewer's files; anything outside its folder is 404."""
    folder = viewer_dir()
    if folder is None:
        raise NotFound("this gateway's playwright has no trace viewer")
    target = (folder / (relative or "index.html")).resolve()
    if not target.is_relative_to(folder) or not target.is_file():
        raise NotFound("no such file of the trace viewer")
    media = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0]
    # The service worker's scope is its own folder: it controls the viewer, not the console.
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": VIEWER_POLICY}
    if target.name == WORKER:
        # A worker's fetches obey the policy its script came with: the viewer reads traces
        # of this gateway only, never one a crafted `?trace=` link points elsewhere.
        headers["Content-Security-Policy"] = WORKER_POLICY
    return FileResponse(target, media_type=media or "application/octet-stream", headers=headers)
