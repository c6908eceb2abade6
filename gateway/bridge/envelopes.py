"""The parent tool bridge envelopes, field for field as the contract defines them.

- `ParentToolBridge` (`wp-codebox/parent-tool-bridge/v1`): what a sandbox is given to
  reach its host dispatcher: allowed tools, dispatcher mode and transport, timeout,
  metadata-only sandbox variables, authorization and redaction notes. Never a credential.
- `ParentToolRequest` (`wp-codebox/parent-tool-request/v1`): one call, sandbox to host.
- `ParentToolResult` (`wp-codebox/parent-tool-result/v1`): its one terminal answer.

Models are strict (no coercion: `"1"` is not a version, `[]` is not an input object) and
refuse unknown fields, so a mistyped or padded envelope is rejected, not guessed at. The
host delegation envelopes share these bases, the request id and the error model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gateway.bridge.schemas import (
    BRIDGE_SCHEMA,
    ENDPOINT_ENV,
    REQUEST_SCHEMA,
    RESULT_SCHEMA,
    SANDBOX_VARIABLES,
    TOKEN_ENV,
    TRANSCRIPT_KIND,
)
from gateway.core.results import ToolStatus

RequestId = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
]
ToolName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
]
EnvName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]
ShortText = Annotated[str, StringConstraints(max_length=2048)]

DispatchMode = Literal["host_endpoint", "host_command"]
Status = Literal["succeeded", "denied", "unavailable", "timeout", "failed"]

# The contract's dispatcher deadline: its default, and the most any caller may ask for.
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 10 * 60 * 1000


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Envelope(Strict):
    """A top-level envelope: its `schema` id is the `schema_` field, read by either name."""

    model_config = ConfigDict(populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# -- the bridge envelope ---------------------------------------------------------------


class Endpoint(Strict):
    url_env: EnvName = ENDPOINT_ENV
    method: Literal["POST"] = "POST"
    token_env: EnvName = TOKEN_ENV


class Command(Strict):
    argv: list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]] = Field(
        min_length=1, max_length=256
    )
    # The request is written to the command's stdin and its result read from stdout.
    transport: Literal["stdio"] = "stdio"


class Dispatcher(Strict):
    owner: Annotated[str, StringConstraints(min_length=1, max_length=128)] = "wp-codebox"
    mode: DispatchMode
    endpoint: Endpoint | None = None
    command: Command | None = None
    request_schema: Literal["wp-codebox/parent-tool-request/v1"] = REQUEST_SCHEMA
    result_schema: Literal["wp-codebox/parent-tool-result/v1"] = RESULT_SCHEMA
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, gt=0, le=MAX_TIMEOUT_MS)

    @model_validator(mode="after")
    def _transport_for_mode(self) -> Dispatcher:
        if self.mode == "host_endpoint" and self.endpoint is None:
            raise ValueError("host_endpoint mode needs dispatcher.endpoint")
        if self.mode == "host_command" and self.command is None:
            raise ValueError("host_command mode needs dispatcher.command.argv")
        return self


class SandboxEnv(Strict):
    mode: Literal["metadata-only"] = "metadata-only"
    variables: dict[str, EnvName] = Field(default_factory=lambda: dict(SANDBOX_VARIABLES))
    # Names of variables that carry secrets. The gateway's own envelopes leave it empty:
    # the bridge token travels in `dispatcher.endpoint.token_env`, never as metadata.
    secret_env: list[EnvName] = Field(default_factory=list, max_length=64)
    notes: ShortText = (
        "Sandbox env injection carries only contract ids, dispatch mode, and optional "
        "artifact/env references. It must not include parent credentials or tool result "
        "payloads."
    )


class BridgeAuthorization(Strict):
    mode: Literal["allowlist"] = "allowlist"
    failure_status: Literal["denied"] = "denied"
    notes: ShortText = (
        "The parent dispatcher executes only tools listed in allowed_tools and returns denied "
        "for authorization failures without attempting fallback execution inside the sandbox."
    )


class TranscriptRef(Strict):
    kind: Literal["tool-call-transcript"] = TRANSCRIPT_KIND
    # A logical, store-relative name; never a host-local path.
    path: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    artifact_id: str | None = None
    sha256: str | None = None


class Redaction(Strict):
    transcript_artifact_refs: list[TranscriptRef] = Field(default_factory=list)
    notes: ShortText = (
        "Dispatchers persist redacted request/result transcripts as artifacts and return "
        "refs. Secret values, bearer tokens, cookies, and host-local paths stay out of "
        "envelopes and transcripts."
    )


class ParentToolBridge(Envelope):
    schema_: Literal["wp-codebox/parent-tool-bridge/v1"] = Field(
        default=BRIDGE_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    allowed_tools: list[ToolName] = Field(max_length=1024)
    dispatcher: Dispatcher
    sandbox_env: SandboxEnv = SandboxEnv()
    authorization: BridgeAuthorization = BridgeAuthorization()
    redaction: Redaction = Redaction()
    metadata: dict[str, Any] = Field(default_factory=dict)


# -- the request envelope --------------------------------------------------------------


class SandboxSession(Strict):
    sandbox_session_id: Annotated[str, StringConstraints(max_length=256)] | None = None
    caller_session_id: Annotated[str, StringConstraints(max_length=256)] | None = None
    task_id: Annotated[str, StringConstraints(max_length=128)] | None = None


class RequestAuthorization(Strict):
    """What the sandbox believes it may do. Never authority: the host decides alone."""

    allowed_tools: list[ToolName] = Field(default_factory=list, max_length=1024)
    capability: Annotated[str, StringConstraints(max_length=64)] | None = None
    principal: dict[str, Any] = Field(default_factory=dict)


class ParentToolRequest(Envelope):
    schema_: Literal["wp-codebox/parent-tool-request/v1"] = Field(
        default=REQUEST_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    request_id: RequestId
    tool: ToolName
    operation: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "call"
    input: dict[str, Any] = Field(default_factory=dict)
    sandbox_session: SandboxSession = SandboxSession()
    authorization: RequestAuthorization = RequestAuthorization()
    metadata: dict[str, Any] = Field(default_factory=dict)


# -- the result envelope ---------------------------------------------------------------


MAX_MESSAGE = 4096


# Why a call did not succeed; the parent tool and host delegation results share it. (A
# comment, not a docstring: pydantic would publish a docstring in the model's schema.)
class ResultError(Strict):
    code: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    message: Annotated[str, StringConstraints(max_length=MAX_MESSAGE)]
    retryable: bool = False

    @classmethod
    def of(cls, code: str, message: str, *, retryable: bool = False) -> ResultError:
        """The error with its message cut to what the contract carries."""
        return cls(code=code, message=message[:MAX_MESSAGE], retryable=retryable)


class ResultArtifacts(Strict):
    # Other dispatchers may describe their evidence with fields of their own.
    model_config = ConfigDict(extra="allow")

    transcripts: list[TranscriptRef] = Field(default_factory=list)
    evidence: list[dict[str, Any]] = Field(default_factory=list)


class ParentToolResult(Envelope):
    schema_: Literal["wp-codebox/parent-tool-result/v1"] = Field(
        default=RESULT_SCHEMA, alias="schema"
    )
    version: Literal[1] = 1
    # Echoed from the request; empty only when the request was too broken to carry one.
    request_id: Annotated[str, StringConstraints(max_length=128)]
    tool: Annotated[str, StringConstraints(max_length=128)]
    operation: Annotated[str, StringConstraints(max_length=64)] = "call"
    status: Status
    output: Any = None
    error: ResultError | None = None
    artifacts: ResultArtifacts = ResultArtifacts()
    diagnostics: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _error_iff_failure(self) -> ParentToolResult:
        if self.status == "succeeded" and self.error is not None:
            raise ValueError("a succeeded result carries no error")
        if self.status != "succeeded" and self.error is None:
            raise ValueError(f"a {self.status} result needs error {{code, message, retryable}}")
        return self

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


def failure(
    status: ToolStatus | Status,
    code: str,
    message: str,
    *,
    request_id: str = "",
    tool: str = "",
    operation: str = "call",
    retryable: bool = False,
    diagnostics: dict[str, Any] | None = None,
) -> ParentToolResult:
    """A failure result envelope (any status but succeeded)."""
    return ParentToolResult(
        request_id=request_id[:128],
        tool=tool[:128],
        operation=operation[:64],
        status=ToolStatus(status).value,
        error=ResultError.of(code, message, retryable=retryable),
        diagnostics=diagnostics or {},
    )
