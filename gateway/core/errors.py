"""The gateway's one exception tree; adapters map library errors into it at the edge.

    GatewayError                 code, message, retryable, http_status, tool_status
    ├── AuthError                401  invalid_token
    │   ├── TokenExpired         401  invalid_token (reason: expired)
    │   └── TokenRevoked         401  revoked
    ├── Forbidden                403  forbidden
    ├── NotFound                 404  not_found
    ├── InvalidInput             422  invalid_input
    ├── PayloadTooLarge          413  payload_too_large
    ├── QuotaExceeded            429  quota_exceeded (details: quota, limit, current, adding)
    ├── StorageError             503  storage_failed
    ├── ArtifactMissing          502  artifact_missing (details: artifact_id)
    ├── InDoubt                  502  in_doubt (details: node_id, call_id): it may have
    │                                 taken effect; asking again may do it twice
    └── ToolFailure              a handler's structured non-success (any status and code)

A tool handler raises `ToolFailure` to end its call with a specific status and code; any
other exception from a handler becomes `failed`/`handler_error`.
"""

from __future__ import annotations

from typing import Any

from gateway.core.results import ErrorCode, ToolError, ToolStatus


class GatewayError(Exception):
    code: str = ErrorCode.HANDLER_ERROR
    http_status: int = 500
    tool_status: ToolStatus = ToolStatus.FAILED
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.details = details

    def to_tool_error(self) -> ToolError:
        return ToolError(
            code=str(self.code),
            message=self.message,
            retryable=self.retryable,
            details=self.details,
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": str(self.code),
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.details:
            body["details"] = self.details
        return {"error": body}


class AuthError(GatewayError):
    code = ErrorCode.INVALID_TOKEN
    http_status = 401
    tool_status = ToolStatus.DENIED


class TokenExpired(AuthError):
    def __init__(self, message: str = "token expired") -> None:
        super().__init__(message, details={"reason": "expired"})


class TokenRevoked(AuthError):
    code = ErrorCode.REVOKED

    def __init__(self, message: str = "the task has ended; its tokens are revoked") -> None:
        super().__init__(message)


class Forbidden(GatewayError):
    code = ErrorCode.FORBIDDEN
    http_status = 403
    tool_status = ToolStatus.DENIED


class NotFound(GatewayError):
    code = ErrorCode.NOT_FOUND
    http_status = 404
    tool_status = ToolStatus.DENIED


class InvalidInput(GatewayError):
    code = ErrorCode.INVALID_INPUT
    http_status = 422


class PayloadTooLarge(GatewayError):
    code = ErrorCode.PAYLOAD_TOO_LARGE
    http_status = 413


class QuotaExceeded(GatewayError):
    """A limit on what an owner may hold at once (not a rate): waiting alone does not help,
    releasing something does, so it is not retryable."""

    code = ErrorCode.QUOTA_EXCEEDED
    http_status = 429
    tool_status = ToolStatus.DENIED


class StorageError(GatewayError):
    code = ErrorCode.STORAGE_FAILED
    http_status = 503
    tool_status = ToolStatus.FAILED
    retryable = True


class ArtifactMissing(GatewayError):
    """An artifact's row is there but its bytes are not: the object store behind the gateway
    (a bucket, the data dir) lost them, hence 502. Asking again will not bring them back."""

    code = "artifact_missing"
    http_status = 502

    def __init__(self, artifact_id: str) -> None:
        super().__init__(
            f"the bytes of artifact {artifact_id} are missing from the artifact store",
            details={"artifact_id": artifact_id},
        )


class InDoubt(GatewayError):
    """What another gateway node was asked to do may or may not have been done: no answer
    from it could be verified before the deadline (a cluster's bus carried replies that were
    not the node's own). Not retryable, as doing it again may do it twice; the tool result's
    status is `unavailable`."""

    code = ErrorCode.IN_DOUBT
    http_status = 502
    tool_status = ToolStatus.UNAVAILABLE


class ToolFailure(GatewayError):
    """A handler's deliberate non-success: `raise ToolFailure(DENIED, ORIGIN_BLOCKED, "...")`."""

    def __init__(
        self,
        status: ToolStatus,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> None:
        if status is ToolStatus.SUCCEEDED:
            raise ValueError("a ToolFailure cannot carry the succeeded status")
        super().__init__(message, code=code, retryable=retryable, details=details)
        self.tool_status = status
