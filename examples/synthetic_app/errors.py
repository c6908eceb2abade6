"""The example app's failures, expressed in the gateway's own error tree.

Reusing the tree means a product tool needs no mapping: a `NotFound` raised by the app's
backend ends the tool call as `denied`/`not_found`, and the dashboard's JSON routes answer
with the same status code and body as the gateway's.
"""

from __future__ import annotations

from gateway.core.errors import Forbidden, GatewayError, InvalidInput, NotFound
from gateway.core.results import ErrorCode, ToolStatus

__all__ = ["Conflict", "Forbidden", "InvalidInput", "NotFound"]


class Conflict(GatewayError):
    """The record exists but is not in a state that allows the action (409)."""

    code = ErrorCode.CONFLICT
    http_status = 409
    tool_status = ToolStatus.FAILED
