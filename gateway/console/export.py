"""A task as one zip archive a reviewer opens elsewhere: its timeline as JSON and as an HTML
page that needs nothing else, its screenshots, its traces and its sandbox's manifest.

Everything in it comes from the evidence store, redacted as evidence is; an artifact whose
bytes are gone is listed in `missing.json` instead of failing the whole export.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.console import pages
from gateway.console.timeline import Entry
from gateway.core.store.artifacts import VIDEO_MEDIA_TYPE

# Screenshots and traces are compressed already: stored as they are, the archive is quick.
_STORED = zipfile.ZIP_STORED
_DEFLATED = zipfile.ZIP_DEFLATED


@dataclass(frozen=True)
class Artifact:
    artifact_id: str
    name: str
    media_type: str
    data: bytes | None  # None: its bytes could not be read


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str).encode()


def archive_name(artifact: Artifact) -> str:
    if artifact.media_type.startswith("image/"):
        return f"screenshots/{artifact.artifact_id}.png"
    if artifact.media_type == VIDEO_MEDIA_TYPE:
        return f"videos/{artifact.artifact_id}.webm"
    if artifact.name.endswith(".zip"):
        return f"traces/{artifact.artifact_id}.zip"
    return f"artifacts/{artifact.artifact_id}"


def build(
    task: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    entries: Sequence[Entry],
    *,
    metrics: Mapping[str, Any],
    approvals: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any] | None,
    artifacts: Sequence[Artifact],
) -> bytes:
    """The archive's bytes (built in memory: call it off the event loop)."""
    buffer = io.BytesIO()
    names = {a.artifact_id: archive_name(a) for a in artifacts if a.data is not None}
    missing = [{"artifact_id": a.artifact_id, "name": a.name} for a in artifacts if a.data is None]
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("task.json", _json(task), _DEFLATED)
        archive.writestr("evidence.json", _json(list(records)), _DEFLATED)
        archive.writestr("timeline.json", _json([x.public() for x in entries]), _DEFLATED)
        archive.writestr("metrics.json", _json(metrics), _DEFLATED)
        archive.writestr("approvals.json", _json(list(approvals)), _DEFLATED)
        if manifest is not None:
            archive.writestr("manifest.json", _json(manifest), _DEFLATED)
        html = pages.archive_timeline(
            task,
            entries,
            metrics=metrics,
            approvals=approvals,
            manifest=manifest,
            shots=names,
        )
        archive.writestr("timeline.html", html.encode(), _DEFLATED)
        for artifact in artifacts:
            if artifact.data is not None:
                archive.writestr(names[artifact.artifact_id], artifact.data, _STORED)
        if missing:
            archive.writestr("missing.json", _json(missing), _DEFLATED)
    return buffer.getvalue()
