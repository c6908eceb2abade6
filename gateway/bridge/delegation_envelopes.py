"""The host delegation envelopes: request, result and event, as the contract names them.

A browser task phase asks the host for generic work with a
`wp-codebox/host-delegation-request/v1`; the host adapter answers with a
`wp-codebox/host-delegation-result/v1`; what happened in between is recorded as
`wp-codebox/host-delegation-event/v1` evidence.

The request rules are the contract's: a non-empty goal or task; object-valued DTO fields
(target, context, execution, orchestrator, metadata); an array of expected artifacts when
present; a 64-hex SHA-256 source digest when present.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from gateway.bridge.envelopes import Envelope, RequestId, ResultError
from gateway.bridge.schemas import (
    DELEGATION_EVENT_SCHEMA,
    DELEGATION_REQUEST_SCHEMA,
    DELEGATION_RESULT_SCHEMA,
)

SessionId = Annotated[str, StringConstraints(min_length=1, max_length=256)]
SourceDigest = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]

DelegationStatus = Literal["accepted", "completed", "failed", "unavailable"]


class HostDelegationRequest(Envelope):
    schema_: Literal["wp-codebox/host-delegation-request/v1"] = Field(
        default=DELEGATION_REQUEST_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    request_id: RequestId
    goal: Annotated[str, StringConstraints(max_length=8192)] | None = None
    task: Annotated[str, StringConstraints(max_length=8192)] | dict[str, Any] | None = None
    target: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    execution: dict[str, Any] = Field(default_factory=dict)
    orchestrator: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    expected_artifacts: list[Any] | None = Field(default=None, max_length=256)
    source_digest: SourceDigest | None = None
    sandbox_session_id: SessionId | None = None
    session_id: SessionId | None = None

    @model_validator(mode="after")
    def _goal_or_task(self) -> HostDelegationRequest:
        goal = self.goal.strip() if self.goal is not None else ""
        task = self.task
        has_task = bool(task.strip()) if isinstance(task, str) else bool(task)
        if not goal and not has_task:
            raise ValueError("a delegation needs a non-empty goal or task")
        return self

    @model_validator(mode="after")
    def _one_session(self) -> HostDelegationRequest:
        if (
            self.sandbox_session_id is not None
            and self.session_id is not None
            and self.sandbox_session_id != self.session_id
        ):
            raise ValueError("sandbox_session_id and session_id name different sessions")
        return self

    @property
    def session(self) -> str | None:
        """The session this request is scoped to, whichever of the two names carried it."""
        return self.sandbox_session_id or self.session_id

    @property
    def digest(self) -> str | None:
        return self.source_digest.lower() if self.source_digest else None


class HostDelegationResult(Envelope):
    schema_: Literal["wp-codebox/host-delegation-result/v1"] = Field(
        default=DELEGATION_RESULT_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    # Echoed from the request; empty only when the request was too broken to carry one.
    request_id: Annotated[str, StringConstraints(max_length=128)]
    status: DelegationStatus
    sandbox_session_id: SessionId | None = None
    session_id: SessionId | None = None
    source_digest: SourceDigest | None = None
    # The provider's payload. A failure the gateway produced never carries one.
    result: dict[str, Any] | None = None
    artifacts: list[Any] = Field(default_factory=list, max_length=256)
    error: ResultError | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _error_iff_failure(self) -> HostDelegationResult:
        if self.status in ("failed", "unavailable") and self.error is None:
            raise ValueError(f"a {self.status} result needs error {{code, message, retryable}}")
        if self.status in ("accepted", "completed") and self.error is not None:
            raise ValueError(f"an {self.status} result carries no error")
        return self


EventName = Literal[
    "received", "rejected", "dispatched", "adapter_event", "result", "result_rejected"
]


class HostDelegationEvent(Envelope):
    schema_: Literal["wp-codebox/host-delegation-event/v1"] = Field(
        default=DELEGATION_EVENT_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    request_id: Annotated[str, StringConstraints(max_length=128)]
    event: EventName
    status: DelegationStatus | None = None
    adapter: Annotated[str, StringConstraints(max_length=128)] | None = None
    at: float = Field(default_factory=time.time)
    data: dict[str, Any] = Field(default_factory=dict)


def delegation_failure(
    code: str,
    message: str,
    *,
    request_id: str = "",
    status: Literal["failed", "unavailable"] = "failed",
    retryable: bool = False,
    request: HostDelegationRequest | None = None,
) -> HostDelegationResult:
    """A gateway-made failure: no payload, only what identifies the request and why."""
    return HostDelegationResult(
        request_id=(request.request_id if request else request_id)[:128],
        status=status,
        sandbox_session_id=request.sandbox_session_id if request else None,
        session_id=request.session_id if request else None,
        source_digest=request.digest if request else None,
        error=ResultError.of(code, message, retryable=retryable),
    )
