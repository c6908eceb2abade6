"""The host dispatcher: one `wp-codebox/parent-tool-request/v1` in, one result out.

The order of checks is the contract's: the envelope's shape first (a broken envelope is
`failed`/`invalid_input`), then authorization, which is decided here alone and never by
what the request claims: the session must be this task's, the operation `call`, the
capability one the tool allows, and the tool on this task's bridge allowlist and
permitted to its identity. Anything else is `denied`, and nothing runs: there is no
fallback of any kind. Only then does the call go through the registry pipeline (the
same pipeline as every other door), with the request id as idempotency key for
side-effect tools, so a repeated request id returns the recorded result.

Every request that reached an identity leaves a redacted transcript artifact, and its ref
is in the result's `artifacts.transcripts`, except a call turned away `overloaded` (503):
nothing of it ran, and its answer must not wait on the store it may have been turned away for.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gateway.bridge import transcript
from gateway.bridge.envelopes import (
    ParentToolRequest,
    ParentToolResult,
    ResultArtifacts,
    ResultError,
    failure,
)
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.schemas import REQUEST_SCHEMA
from gateway.bridge.validation import EnvelopeInvalid, parse_envelope
from gateway.core.errors import GatewayError, ToolFailure
from gateway.core.identity import TaskIdentity
from gateway.core.ports import CallRunner, EventRecorder
from gateway.core.redaction import Redactor
from gateway.core.registry import Registry
from gateway.core.results import Door, ErrorCode, ToolResult, ToolStatus
from gateway.core.store.database import Store

log = logging.getLogger(__name__)

CAPABILITIES = frozenset({"read", "write"})


def _denied(code: str, message: str) -> ToolFailure:
    return ToolFailure(ToolStatus.DENIED, code, message)


def retry_after(result: ParentToolResult) -> int | None:
    """The seconds to wait before asking again, for a call turned away as `overloaded`
    (an HTTP client reads them as 503 and `Retry-After`); None for any other result."""
    if result.error is None or result.error.code != ErrorCode.OVERLOADED:
        return None
    details = result.diagnostics.get("details")
    value = details.get("retry_after_s") if isinstance(details, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 1


def _echo(body: Any, key: str, limit: int) -> str:
    """A field of a broken request, echoed only when it is a short plain string."""
    value = body.get(key) if isinstance(body, dict) else None
    if isinstance(value, str) and len(value) <= limit and value.isprintable():
        return value
    return ""


class ParentToolHost:
    def __init__(
        self,
        *,
        calls: CallRunner,
        registry: Registry,
        events: EventRecorder,
        store: Store,
        redactor: Redactor,
        data_dir: Path,
        metrics: BridgeMetrics,
    ) -> None:
        self.calls = calls
        self.registry = registry
        self.events = events
        self.store = store
        self.redactor = redactor
        self.metrics = metrics
        self._host_paths = sorted({str(data_dir.resolve()), str(data_dir.absolute())})

    async def handle(
        self, identity: TaskIdentity, token: str, body: Any
    ) -> tuple[int, ParentToolResult]:
        """The HTTP status and the result envelope for one request body."""
        try:
            request = parse_envelope(ParentToolRequest, body, REQUEST_SCHEMA)
        except EnvelopeInvalid as exc:
            result = failure(
                ToolStatus.FAILED,
                ErrorCode.INVALID_INPUT,
                exc.message,
                request_id=_echo(body, "request_id", 128),
                tool=_echo(body, "tool", 128),
                diagnostics=exc.diagnostics(),
            )
            self.events.repeated(identity, "parent-tool.rejected", {"reason": exc.message})
            return 422, await self._finish(identity, token, body, result, None)

        try:
            self._authorize(identity, request)
        except ToolFailure as exc:
            result = failure(
                exc.tool_status,
                str(exc.code),
                exc.message,
                request_id=request.request_id,
                tool=request.tool,
                operation=request.operation,
            )
            self.events.repeated(
                identity,
                "parent-tool.denied",
                {"request_id": request.request_id, "tool": request.tool, "code": exc.code},
            )
            return 200, await self._finish(identity, token, request.wire(), result, None)

        tool = self.registry.get(request.tool)
        assert tool is not None  # _authorize refuses unknown tools
        outcome = await self.calls.call(
            identity,
            request.tool,
            request.input,
            door=Door.BRIDGE,
            idempotency_key=request.request_id if tool.side_effects else None,
        )
        result = self._from_tool_result(request, outcome)
        # The transcript keeps the input as the call's evidence does: no secret typed into
        # a password field, no second copy of a large file.
        recorded = {**request.wire(), "input": outcome.recorded_input}
        if retry_after(result) is not None:
            # Turned away before anything ran, perhaps because the evidence store is behind:
            # the answer does not wait on that store for a transcript of nothing done.
            return 503, self._answered(identity, result)
        return 200, await self._finish(identity, token, recorded, result, outcome.call_id)

    def _authorize(self, identity: TaskIdentity, request: ParentToolRequest) -> None:
        session = request.sandbox_session
        if session.task_id is not None and session.task_id != identity.task_id:
            raise _denied(ErrorCode.FORBIDDEN, "the request names another task's session")
        if request.operation != "call":
            raise _denied(
                ErrorCode.FORBIDDEN, f"operation {request.operation[:64]!r} is not authorized"
            )
        tool = self.registry.get(request.tool)
        if tool is None:
            raise _denied(
                ErrorCode.UNKNOWN_TOOL, f"no tool named {request.tool!r} is available to this task"
            )
        # The envelope's allowlist, decided for this one tool (a tool a person may approve
        # is on it: the pipeline then waits for the approval).
        if not tool.reachable(identity):
            raise _denied(
                ErrorCode.FORBIDDEN, f"{request.tool!r} is not on this task's bridge allowlist"
            )
        claimed = request.authorization.allowed_tools
        if claimed and request.tool not in claimed:
            # The sandbox's own policy excludes the tool: honour the narrower of the two.
            raise _denied(
                ErrorCode.FORBIDDEN, f"{request.tool!r} is outside the request's own allowlist"
            )
        capability = request.authorization.capability
        if capability is not None:
            if capability not in CAPABILITIES:
                raise _denied(ErrorCode.FORBIDDEN, f"capability {capability[:64]!r} is unknown")
            if capability == "read" and tool.side_effects:
                raise _denied(
                    ErrorCode.FORBIDDEN,
                    f"{request.tool!r} has side effects; 'read' does not cover it",
                )

    def _from_tool_result(
        self, request: ParentToolRequest, outcome: ToolResult
    ) -> ParentToolResult:
        error = None
        if outcome.error is not None:
            error = ResultError.of(
                outcome.error.code[:128],
                self.redactor.text(outcome.error.message),
                retryable=outcome.error.retryable,
            )
        diagnostics: dict[str, Any] = {
            "call_id": outcome.call_id,
            "replayed": outcome.replayed,
            "truncated": outcome.truncated,
        }
        if outcome.error is not None and outcome.error.details:
            diagnostics["details"] = self.redactor.value(outcome.error.details)
        return ParentToolResult(
            request_id=request.request_id,
            tool=request.tool,
            operation=request.operation,
            status=outcome.status.value,
            output=outcome.output if outcome.ok else None,
            error=error,
            artifacts=ResultArtifacts(evidence=[{"kind": "tool-call", "call_id": outcome.call_id}]),
            diagnostics=diagnostics,
        )

    def _answered(self, identity: TaskIdentity, result: ParentToolResult) -> ParentToolResult:
        """The result as it is answered (its task named), counted."""
        code = result.error.code if result.error else "-"
        self.metrics.requests.labels(result.status, code).inc()
        return result.model_copy(update={"metadata": {"task_id": identity.task_id}})

    async def _finish(
        self,
        identity: TaskIdentity,
        token: str,
        request_body: Any,
        result: ParentToolResult,
        call_id: str | None,
    ) -> ParentToolResult:
        """Persist the transcript and return the result carrying its ref."""
        result = self._answered(identity, result)
        try:
            ref = await transcript.persist(
                self.store,
                self.redactor,
                identity,
                request=request_body,
                result=result.wire(),
                call_id=call_id,
                # The credential of this call and where this gateway keeps its data are
                # removed by value, whatever text surrounds them.
                credentials=[token, *self._host_paths],
            )
        except GatewayError as exc:
            # The call's outcome stands (its evidence is already committed); say why the
            # transcript is missing instead of turning a finished call into a failure.
            log.warning("parent tool transcript not stored: %s", exc.message)
            diagnostics = {**result.diagnostics, "transcript_error": exc.code}
            return result.model_copy(update={"diagnostics": diagnostics})
        artifacts = result.artifacts.model_copy(update={"transcripts": [ref]})
        return result.model_copy(update={"artifacts": artifacts})
