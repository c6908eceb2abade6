"""The sandbox side's two ways to reach the host dispatcher, with every failure mapped.

- `EndpointDispatch` (`host_endpoint`): HTTP POST of the request envelope, with the bridge
  token as a Bearer credential.
- `CommandDispatch` (`host_command`): runs the declared argv, writes the request envelope
  to its stdin and reads the result envelope from its stdout.

Both end in exactly one `ParentToolResult`, and the mapping of what can go wrong is the
contract's: an unreachable or missing dispatcher is `unavailable`, one that exceeds the
declared timeout is `timeout` (and is stopped), an answer that is not a result envelope
for this request is `failed`. Neither ever runs the tool itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import certifi
import httpx

from gateway.bridge.envelopes import ParentToolRequest, ParentToolResult, failure
from gateway.bridge.schemas import RESULT_SCHEMA
from gateway.bridge.validation import EnvelopeInvalid, load_json, parse_envelope

MAX_RESULT_BYTES = 16 * 1024 * 1024


class Dispatch(Protocol):
    async def send(self, request: ParentToolRequest, timeout_s: float) -> ParentToolResult: ...


def _fail(
    request: ParentToolRequest, status: str, code: str, message: str, **kw: Any
) -> ParentToolResult:
    return failure(
        status,  # type: ignore[arg-type]
        code,
        message,
        request_id=request.request_id,
        tool=request.tool,
        operation=request.operation,
        **kw,
    )


def timed_out(request: ParentToolRequest, timeout_s: float) -> ParentToolResult:
    return _fail(
        request,
        "timeout",
        "timeout",
        f"the parent dispatcher did not answer within {timeout_s * 1000:.0f} ms",
        retryable=True,
    )


def unavailable(
    request: ParentToolRequest, message: str, *, retryable: bool = True
) -> ParentToolResult:
    return _fail(request, "unavailable", "unavailable", message, retryable=retryable)


def read_result(request: ParentToolRequest, text: bytes | str) -> ParentToolResult | None:
    """The dispatcher's answer as a result envelope for this request; None if it is none.

    A valid envelope for another request or tool is a dispatcher fault, not an answer.
    """
    try:
        result = parse_envelope(ParentToolResult, load_json(text), RESULT_SCHEMA)
    except EnvelopeInvalid:
        return None
    if result.request_id and (
        result.request_id != request.request_id or (result.tool and result.tool != request.tool)
    ):
        return _fail(
            request,
            "failed",
            "invalid_result",
            "the parent dispatcher answered a different request",
        )
    return result


@functools.cache
def _tls() -> ssl.SSLContext:
    # Built once: a fresh context per call (httpx's default) costs more than the call.
    return ssl.create_default_context(cafile=certifi.where())


class EndpointDispatch:
    def __init__(
        self, url: str, token: str, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.url = url
        self.token = token
        self.transport = transport

    async def send(self, request: ParentToolRequest, timeout_s: float) -> ParentToolResult:
        headers = {"authorization": f"Bearer {self.token}", "accept": "application/json"}
        try:
            async with (
                asyncio.timeout(timeout_s),
                httpx.AsyncClient(
                    timeout=timeout_s,
                    transport=self.transport,
                    follow_redirects=False,
                    verify=_tls(),
                ) as client,
            ):
                response = await client.post(self.url, json=request.wire(), headers=headers)
        except (TimeoutError, httpx.TimeoutException):
            return timed_out(request, timeout_s)
        except httpx.HTTPError as exc:
            return unavailable(
                request, f"the parent dispatcher cannot be reached ({type(exc).__name__})"
            )
        if len(response.content) > MAX_RESULT_BYTES:
            return _fail(
                request, "failed", "invalid_result", "the dispatcher's answer is too large"
            )
        result = read_result(request, response.content)
        if result is not None:
            return result
        return self._from_status(request, response.status_code)

    @staticmethod
    def _from_status(request: ParentToolRequest, status: int) -> ParentToolResult:
        """An answer without an envelope: say what its HTTP status means in the contract."""
        if status in (401, 403):
            code = "invalid_token" if status == 401 else "forbidden"
            return _fail(
                request, "denied", code, f"the parent dispatcher refused the call ({status})"
            )
        if status in (404, 405) or status >= 500:
            return unavailable(request, f"the parent dispatcher is not available here ({status})")
        if status == 413:
            return _fail(request, "failed", "payload_too_large", "the request is too large")
        return _fail(
            request,
            "failed",
            "invalid_result",
            f"the parent dispatcher answered {status} without a result envelope",
        )


class CommandDispatch:
    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.argv = list(argv)
        self.env = dict(env)

    async def send(self, request: ParentToolRequest, timeout_s: float) -> ParentToolResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=self.env,
                # Its own process group, so a timeout stops the command and its children.
                start_new_session=True,
            )
        except OSError as exc:
            return unavailable(
                request,
                f"the parent dispatcher command cannot be started ({type(exc).__name__})",
                retryable=False,
            )
        payload = request.model_dump_json(by_alias=True, exclude_none=True).encode()
        try:
            async with asyncio.timeout(timeout_s):
                out, _ = await proc.communicate(payload)
        except TimeoutError:
            _stop(proc)
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()
            return timed_out(request, timeout_s)
        except BaseException:
            _stop(proc)
            raise
        if len(out) > MAX_RESULT_BYTES:
            return _fail(
                request, "failed", "invalid_result", "the dispatcher's answer is too large"
            )
        result = read_result(request, out)
        if result is not None:
            return result
        return _fail(
            request,
            "failed",
            "invalid_result",
            f"the parent dispatcher command exited {proc.returncode} without a result envelope",
            diagnostics={"exit_code": proc.returncode},
        )


def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
