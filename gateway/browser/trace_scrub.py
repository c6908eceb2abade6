"""A task browser's trace with its secrets taken out, before it is kept as an artifact.

Playwright's trace holds what each action was given (a fill's value), the DOM snapshots
(an input's value), the network (a form post's body) and screenshots. Evidence shows a
secret as `[secret: N chars]`; the trace must not show it either. Every entry of the zip is
rewritten with each secret replaced, in each form it can take there (as typed, escaped in
JSON, form-encoded). Screenshots cannot be scrubbed: when a secret was typed into a field
that shows it, the trace keeps no screenshot at all.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REPLACEMENT = b"[secret]"
_IMAGES = (".jpeg", ".jpg", ".png", ".webp")


def _forms(secret: str) -> set[bytes]:
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote_plus(secret),
        quote(secret, safe=""),
    }
    # JSON inside JSON (a trace event's params as a string): escaped twice.
    forms.add(json.dumps(json.dumps(secret)[1:-1])[1:-1])
    return {f.encode() for f in forms if f}


def scrub(data: bytes, secrets: Iterable[str], *, drop_images: bool = False) -> bytes:
    """The trace zip `data` with every form of every secret replaced."""
    forms = sorted({f for s in secrets if s for f in _forms(s)}, key=len, reverse=True)
    if not forms and not drop_images:
        return data
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            if drop_images and info.filename.lower().endswith(_IMAGES):
                continue
            body = source.read(info)
            for form in forms:
                body = body.replace(form, REPLACEMENT)
            if drop_images and info.filename.endswith(".trace"):
                body = b"\n".join(
                    line for line in body.split(b"\n") if b'"screencast-frame"' not in line
                )
            target.writestr(info.filename, body)
    return out.getvalue()
