"""A small typed client of Incus's REST API, on httpx: the calls the `incus` provider makes.

Incus answers on a unix socket on its own machine (`/var/lib/incus/unix.socket`) and over
HTTPS, with a client certificate the server trusts, elsewhere (a remote Incus, or any
member of an Incus cluster). Both are one `httpx.AsyncClient`; only the transport differs.

Every answer is Incus's envelope `{type: sync|async|error, metadata, error_code, error}`.
An asynchronous one names an operation, waited for with `/1.0/operations/{id}/wait`.
Failures become one exception, `IncusError`, carrying the HTTP status and Incus's message,
so the provider maps them into the gateway's tree in one place.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

API = "/1.0"
DEFAULT_SOCKET = "/var/lib/incus/unix.socket"
# An operation (a start, a delete) is waited for at most this long per call.
OPERATION_WAIT_S = 120


class IncusError(Exception):
    """Incus refused a call, or could not be reached (`status` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"incus: {message} ({status})" if status else f"incus: {message}")
        self.status = status
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """A compare-and-set lost (412), or the object exists already (409)."""
        return self.status in (409, 412)


@dataclass(frozen=True)
class Endpoint:
    """Where Incus answers: a local socket, or an HTTPS URL with the client's certificate
    and key and the server's certificate (or CA) to verify it by."""

    socket: str | None = DEFAULT_SOCKET
    url: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    server_cert: str | None = None
    project: str = "default"

    def client(self, timeout_s: float) -> httpx.AsyncClient:
        timeout = httpx.Timeout(timeout_s, read=OPERATION_WAIT_S + timeout_s)
        if self.url is not None:
            # The server's own certificate (or its CA) is what it is verified by; the
            # client's is what Incus trusts this gateway by.
            context = ssl.create_default_context(cafile=self.server_cert)
            if self.client_cert:
                context.load_cert_chain(self.client_cert, self.client_key)
            transport = httpx.AsyncHTTPTransport(verify=context)
            return httpx.AsyncClient(base_url=self.url, transport=transport, timeout=timeout)
        transport = httpx.AsyncHTTPTransport(uds=self.socket or DEFAULT_SOCKET)
        return httpx.AsyncClient(base_url="http://incus", transport=transport, timeout=timeout)


class Incus:
    """One connection to Incus. `async with Incus(endpoint) as incus: ...`"""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        self._http = endpoint.client(timeout_s)

    async def __aenter__(self) -> Incus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    # -- the envelope -----------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        query = {"project": self.endpoint.project, **(params or {})}
        try:
            response = await self._http.request(
                method,
                API + path,
                json=body if content is None else None,
                content=content,
                headers=headers,
                params=query,
            )
        except httpx.HTTPError as exc:
            raise IncusError(0, f"cannot reach Incus: {exc}") from exc
        if response.status_code >= 400:
            raise IncusError(response.status_code, _error_text(response))
        if response.headers.get("content-type", "").startswith("application/json"):
            envelope = response.json()
            if isinstance(envelope, dict) and envelope.get("type") == "error":
                raise IncusError(int(envelope.get("error_code") or 500), _error_text(response))
        return response

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The `metadata` of a synchronous answer; an asynchronous one is waited for and
        its operation's metadata returned."""
        response = await self._call(method, path, **kwargs)
        envelope = response.json()
        if envelope.get("type") == "async":
            return await self.wait(envelope["operation"])
        return envelope.get("metadata")

    async def wait(self, operation: str) -> Any:
        """Wait for an operation (`/1.0/operations/{id}`) to end; its metadata, or the
        failure it ended with as an `IncusError`."""
        op_id = operation.rsplit("/", 1)[-1]
        response = await self._call(
            "GET", f"/operations/{op_id}/wait", params={"timeout": str(OPERATION_WAIT_S)}
        )
        meta = response.json().get("metadata") or {}
        status = meta.get("status_code", 200)
        if status >= 400:
            raise IncusError(status, str(meta.get("err") or meta.get("status")))
        if meta.get("status") == "Running":
            raise IncusError(504, f"operation {op_id} still running after {OPERATION_WAIT_S} s")
        return meta

    async def operation(self, method: str, path: str, **kwargs: Any) -> str:
        """Start an asynchronous call and return its operation's id, without waiting."""
        response = await self._call(method, path, **kwargs)
        envelope = response.json()
        operation: str = envelope["operation"]
        return operation.rsplit("/", 1)[-1]

    async def operation_state(self, op_id: str, *, wait_s: float) -> dict[str, Any]:
        """The operation as it is after waiting up to `wait_s` for it to end (its status
        is still `Running` if it has not)."""
        if wait_s > 0:
            # A wait that times out answers an error envelope, not the operation.
            with contextlib.suppress(IncusError):
                response = await self._call(
                    "GET", f"/operations/{op_id}/wait", params={"timeout": str(int(wait_s))}
                )
                envelope = response.json()
                if envelope.get("type") != "error" and envelope.get("metadata"):
                    meta: dict[str, Any] = envelope["metadata"]
                    return meta
        found: dict[str, Any] = await self.request("GET", f"/operations/{op_id}")
        return found

    # -- instances ---------------------------------------------------------------------------

    async def instances(self, *, prefix: str) -> list[dict[str, Any]]:
        found = await self.request("GET", "/instances", params={"recursion": "1"})
        return [i for i in found or [] if str(i.get("name", "")).startswith(prefix)]

    async def instance(self, name: str) -> tuple[dict[str, Any], str]:
        """The instance and its ETag (for a compare-and-set)."""
        response = await self._call("GET", f"/instances/{quote(name)}")
        return response.json()["metadata"], response.headers.get("ETag", "")

    async def patch_instance(self, name: str, changes: dict[str, Any], *, etag: str) -> None:
        """Change an instance only if it is still what `etag` says (412 otherwise)."""
        await self.request(
            "PATCH", f"/instances/{quote(name)}", body=changes, headers={"If-Match": etag}
        )

    async def replace_instance(self, name: str, instance: dict[str, Any], *, etag: str) -> None:
        """Put the instance's whole writable part (keys left out are removed, unlike a
        PATCH), only if it is still what `etag` says."""
        writable = {
            key: instance[key]
            for key in ("architecture", "config", "devices", "ephemeral", "profiles", "description")
            if key in instance
        }
        await self.request(
            "PUT", f"/instances/{quote(name)}", body=writable, headers={"If-Match": etag}
        )

    async def state(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.request("GET", f"/instances/{quote(name)}/state")
        return found

    async def create(self, spec: dict[str, Any]) -> None:
        await self.request("POST", "/instances", body=spec)

    async def change_state(self, name: str, action: str, *, force: bool = False) -> None:
        await self.request(
            "PUT",
            f"/instances/{quote(name)}/state",
            body={"action": action, "force": force, "timeout": 10},
        )

    async def delete(self, name: str) -> None:
        await self.request("DELETE", f"/instances/{quote(name)}")

    async def delete_forced(self, name: str) -> None:
        """Stop the instance at once (if it runs) and delete it."""
        with contextlib.suppress(IncusError):
            await self.change_state(name, "stop", force=True)
        await self.delete(name)

    async def exec(
        self,
        name: str,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        user: int = 0,
        cwd: str = "/",
    ) -> str:
        """Start `command` in the instance; the id of its operation, which ends with it.
        Its output is recorded by Incus (`output` of the operation's metadata)."""
        return await self.operation(
            "POST",
            f"/instances/{quote(name)}/exec",
            body={
                "command": command,
                "environment": env or {},
                "user": user,
                "group": user,
                "cwd": cwd,
                "wait-for-websocket": False,
                "interactive": False,
                "record-output": True,
            },
        )

    async def run(
        self, name: str, command: list[str], *, user: int = 0, limit: int = 1 << 20
    ) -> tuple[int, bytes]:
        """Run `command` to its end: its exit code and its standard output (at most
        `limit` bytes are read)."""
        op_id = await self.exec(name, command, user=user)
        meta = await self.wait(op_id)
        inner = meta.get("metadata") or {}
        code = int(inner.get("return", -1))
        output = (inner.get("output") or {}).get("1")
        data = b""
        if output:
            data = await self.log(output, limit=limit)
        return code, data

    async def log(self, path: str, *, limit: int) -> bytes:
        """A recorded output file (a path Incus gave, under /1.0/instances/…/logs/)."""
        relative = path.removeprefix(API)
        try:
            async with self._http.stream(
                "GET", API + relative, params={"project": self.endpoint.project}
            ) as response:
                if response.status_code >= 400:
                    raise IncusError(response.status_code, "the recorded output is gone")
                data = b""
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise IncusError(413, f"the output is larger than {limit} bytes")
                return data
        except httpx.HTTPError as exc:
            raise IncusError(0, f"cannot read the output: {exc}") from exc

    # -- images, profiles, pools -------------------------------------------------------------

    async def has(self, path: str) -> bool:
        try:
            await self.request("GET", path)
        except IncusError as exc:
            if exc.not_found:
                return False
            raise
        return True

    async def import_image(self, tarball: bytes, *, alias: str) -> None:
        meta = await self.request(
            "POST",
            "/images",
            content=tarball,
            headers={"Content-Type": "application/octet-stream"},
        )
        fingerprint = (meta.get("metadata") or {}).get("fingerprint")
        if not fingerprint:
            raise IncusError(500, "the image import named no fingerprint")
        try:
            await self.request(
                "POST", "/images/aliases", body={"name": alias, "target": fingerprint}
            )
        except IncusError as exc:
            if not exc.conflict:
                raise


def _error_text(response: httpx.Response) -> str:
    try:
        envelope = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:300] or response.reason_phrase
    return str(envelope.get("error") or envelope.get("metadata") or response.reason_phrase)
