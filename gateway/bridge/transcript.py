"""The redacted transcript of one bridge call, persisted as an artifact of the task.

A transcript holds the request and result envelopes as the dispatcher saw them, after
redaction: the exact credential that authorized the call is removed first (whatever its
shape), then the gateway's redactor removes secret-keyed values, bearer credentials,
signed tokens, JWTs, cookie headers, known secret values (the gateway's keys and
secret-looking environment variables) and host-local absolute paths. The artifact is
stored under the task's owner and its ref goes back in `artifacts.transcripts`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from gateway.bridge.envelopes import TranscriptRef
from gateway.bridge.schemas import TRANSCRIPT_KIND
from gateway.core.identity import TaskIdentity
from gateway.core.redaction import REDACTED, Redactor
from gateway.core.store.database import Store

TRANSCRIPT_SCHEMA = "gateway/parent-tool-transcript/v1"


def scrub(value: Any, secrets: Iterable[str], redactor: Redactor) -> Any:
    """`value` with each of `secrets` replaced wherever it occurs, then redacted."""
    known = sorted({s for s in secrets if s}, key=len, reverse=True)

    def strip(item: Any, depth: int = 0) -> Any:
        if depth > 64:
            return REDACTED
        if isinstance(item, str):
            for secret in known:
                item = item.replace(secret, REDACTED)
            return item
        if isinstance(item, dict):
            return {strip(str(k), depth + 1): strip(v, depth + 1) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [strip(v, depth + 1) for v in item]
        return item

    return redactor.value(strip(value))


async def persist(
    store: Store,
    redactor: Redactor,
    identity: TaskIdentity,
    *,
    request: dict[str, Any],
    result: dict[str, Any],
    call_id: str | None,
    credentials: Iterable[str] = (),
) -> TranscriptRef:
    request_id = str(result.get("request_id") or "unknown")
    document = scrub(
        {
            "schema": TRANSCRIPT_SCHEMA,
            "recorded_at": time.time(),
            "task_id": identity.task_id,
            "call_id": call_id,
            "request": request,
            "result": result,
        },
        credentials,
        redactor,
    )
    data = json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    name = f"parent-tools/{request_id}.json"
    ref = await store.put_artifact(identity, data, name=name, media_type="application/json")
    return TranscriptRef(
        kind=TRANSCRIPT_KIND, path=f"files/{name}", artifact_id=ref.id, sha256=ref.sha256
    )
