"""Host delegation: validate the request, run a host adapter, validate what it returned.

    request ──validate──▶ adapter.delegate ──validate──▶ result
       │ invalid: failed/invalid_request     │ malformed, other request id, other
       ▼                                     │ session, stale digest: a failure result
    host-delegation-event/v1 evidence at each step   with no payload

The gateway owns the envelope on both sides of the adapter: a provider payload reaches the
caller only when its status is one of accepted/completed/failed/unavailable and every
request id, session id and source digest it states matches the request. Otherwise the
caller gets a structured `wp-codebox/host-delegation-result/v1` failure carrying no
result payload, and nothing is run anywhere else instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gateway.bridge.adapters import DelegationContext, DelegationHosts
from gateway.bridge.delegation_envelopes import (
    EventName,
    HostDelegationEvent,
    HostDelegationRequest,
    HostDelegationResult,
    delegation_failure,
)
from gateway.bridge.envelopes import MAX_TIMEOUT_MS
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.schemas import DELEGATION_REQUEST_SCHEMA, DELEGATION_RESULT_SCHEMA
from gateway.bridge.validation import EnvelopeInvalid, parse_envelope
from gateway.core.identity import TaskIdentity
from gateway.core.ports import CallRunner, EventRecorder

log = logging.getLogger(__name__)

EVENT_KIND = "host-delegation-event"
# Host work runs longer than one tool call, so it waits longer unless the request says.
DELEGATION_TIMEOUT_MS = 60_000


class ResultRejected(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_result(request: HostDelegationRequest, payload: Any) -> HostDelegationResult:
    """The adapter's payload as a result envelope, or ResultRejected saying why not."""
    if not isinstance(payload, Mapping):
        raise ResultRejected("invalid_provider_result", "the host adapter returned no object")
    # The provider may leave out the contract's constants and the request id; what it
    # does state is checked exactly.
    data = {
        "schema": DELEGATION_RESULT_SCHEMA,
        "version": 1,
        "request_id": request.request_id,
        **payload,
    }
    try:
        result = parse_envelope(HostDelegationResult, data, DELEGATION_RESULT_SCHEMA)
    except EnvelopeInvalid as exc:
        raise ResultRejected(
            "invalid_provider_result", f"the host adapter's result is malformed: {exc.message}"
        ) from None
    if result.request_id != request.request_id:
        raise ResultRejected("request_mismatch", "the host adapter answered a different request id")
    for field in ("sandbox_session_id", "session_id"):
        stated = getattr(result, field)
        if stated is not None and stated != request.session:
            raise ResultRejected(
                "session_mismatch", f"the host adapter's {field} is not the request's session"
            )
    if result.source_digest is not None and result.source_digest.lower() != request.digest:
        raise ResultRejected(
            "stale_source_digest",
            "the host adapter's source_digest does not match the request's (stale source)",
        )
    return result


def _timeout_s(request: HostDelegationRequest) -> float:
    value = request.execution.get("timeout_ms")
    if type(value) is int and 0 < value <= MAX_TIMEOUT_MS:
        return value / 1000
    return DELEGATION_TIMEOUT_MS / 1000


class DelegationService:
    def __init__(
        self,
        *,
        calls: CallRunner,
        events: EventRecorder,
        hosts: DelegationHosts,
        metrics: BridgeMetrics,
    ) -> None:
        self.calls = calls
        self.events = events
        self.hosts = hosts
        self.metrics = metrics

    async def _event(
        self,
        identity: TaskIdentity,
        request_id: str,
        event: EventName,
        *,
        status: Any = None,
        adapter: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        envelope = HostDelegationEvent(
            request_id=request_id[:128],
            event=event,
            status=status,
            adapter=adapter,
            data=dict(data or {}),
        )
        await self.events.record(identity, EVENT_KIND, envelope.wire())

    def _count(self, result: HostDelegationResult) -> HostDelegationResult:
        self.metrics.delegations.labels(
            result.status, result.error.code if result.error else "-"
        ).inc()
        return result

    async def handle(self, identity: TaskIdentity, body: Any) -> tuple[int, HostDelegationResult]:
        raw_id = body.get("request_id") if isinstance(body, dict) else None
        echo_id = raw_id if isinstance(raw_id, str) and raw_id.isprintable() else ""
        await self._event(identity, echo_id, "received")
        try:
            request = parse_envelope(HostDelegationRequest, body, DELEGATION_REQUEST_SCHEMA)
        except EnvelopeInvalid as exc:
            await self._event(
                identity, echo_id, "rejected", data={"reason": exc.message, **exc.diagnostics()}
            )
            result = delegation_failure("invalid_request", exc.message, request_id=echo_id)
            return 422, self._count(result)

        wanted = request.orchestrator.get("adapter")
        adapter = self.hosts.get(wanted if isinstance(wanted, str) else None)
        if adapter is None:
            result = delegation_failure(
                "unavailable",
                "no host adapter is configured for this delegation",
                status="unavailable",
                request=request,
            )
            await self._event(identity, request.request_id, "result", status=result.status)
            return 200, self._count(result)

        async def emit(data: dict[str, Any]) -> None:
            await self._event(
                identity, request.request_id, "adapter_event", adapter=adapter.name, data=data
            )

        context = DelegationContext(identity=identity, pipeline=self.calls, emit=emit)
        await self._event(identity, request.request_id, "dispatched", adapter=adapter.name)
        try:
            payload = await asyncio.wait_for(
                adapter.delegate(request, context), timeout=_timeout_s(request)
            )
        except TimeoutError:
            result = delegation_failure(
                "timeout",
                "the host adapter did not answer in time",
                retryable=True,
                request=request,
            )
            return 200, await self._rejected(identity, request, adapter.name, result)
        except Exception as exc:
            log.warning("host adapter %s failed: %r", adapter.name, exc)
            result = delegation_failure(
                "adapter_error",
                f"the host adapter failed: {type(exc).__name__}",
                request=request,
            )
            return 200, await self._rejected(identity, request, adapter.name, result)

        try:
            result = check_result(request, payload)
        except ResultRejected as exc:
            result = delegation_failure(exc.code, exc.message, request=request)
            return 200, await self._rejected(identity, request, adapter.name, result)
        await self._event(
            identity, request.request_id, "result", status=result.status, adapter=adapter.name
        )
        return 200, self._count(result)

    async def _rejected(
        self,
        identity: TaskIdentity,
        request: HostDelegationRequest,
        adapter: str,
        result: HostDelegationResult,
    ) -> HostDelegationResult:
        assert result.error is not None
        await self._event(
            identity,
            request.request_id,
            "result_rejected",
            status=result.status,
            adapter=adapter,
            data={"code": result.error.code, "reason": result.error.message},
        )
        return self._count(result)
