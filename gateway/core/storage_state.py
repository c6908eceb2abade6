"""A signed-in task's storage state: the cookies and local storage the control plane gives
a task's browser when it creates the task (`POST /v1/tasks`, `storage_state`).

It is a credential. It is checked here, strictly, before anything of the task exists: its
shape and size, every cookie's domain exactly the host of one of the task's origins (never
a parent domain, which would cover hosts the task does not have), every local-storage
origin one of them. Its values are `SecretStr`, so no dump, repr or log of a request shows
them. `StorageStates` holds each task's state in this process's memory only, never in the
store: it is read when the task's browser context is made, and dropped when the task ends.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from gateway.core.origins import OriginError, normalize_origin

# The whole state as JSON; a browser's own bound on one cookie is 4096 bytes.
MAX_STATE_BYTES = 64 * 1024
MAX_COOKIES = 100
MAX_ORIGINS = 20
MAX_ITEMS_PER_ORIGIN = 200
MAX_COOKIE_BYTES = 4096
MAX_ITEM_BYTES = 16 * 1024
# Values shorter than this are not looked for in what the task shows (snapshots, console
# text, the trace): replacing "1" or "en" everywhere would garble all of it, and so short
# a value is no credential.
MIN_MASKED_CHARS = 6

# RFC 6265: a cookie's name is a token; its value has no controls, no `;`, no `,`, no
# whitespace, no `"` inside, no `\`.
_COOKIE_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
_COOKIE_VALUE = re.compile(r'^"?[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"?$')
_PATH = re.compile(r"^/[\x21-\x3a\x3c-\x7e]{0,1023}$")


class StorageCookie(BaseModel):
    """One cookie, in Playwright's storage-state shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    value: SecretStr
    domain: str = Field(min_length=1, max_length=253)
    path: str = "/"
    expires: float = Field(default=-1, ge=-1, le=253402300799)
    httpOnly: bool = False  # Playwright's names, as its storage state spells them
    secure: bool = False
    sameSite: Literal["Strict", "Lax", "None"] = "Lax"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _COOKIE_NAME.fullmatch(value):
            raise ValueError("a cookie's name is 1 to 256 token characters (RFC 6265)")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: SecretStr) -> SecretStr:
        text = value.get_secret_value()
        if len(text.encode()) > MAX_COOKIE_BYTES or not _COOKIE_VALUE.fullmatch(text):
            raise ValueError(
                f"a cookie's value is at most {MAX_COOKIE_BYTES} bytes of cookie characters"
                " (no controls, spaces, ';', ',' or '\\')"
            )
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError("a cookie's path starts with '/' and has no controls or ';'")
        return value

    @model_validator(mode="after")
    def _none_is_secure(self) -> StorageCookie:
        if self.sameSite == "None" and not self.secure:
            raise ValueError("a cookie with sameSite None must be secure (browsers drop it)")
        return self


class StorageItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=1024)
    value: SecretStr

    @field_validator("value")
    @classmethod
    def _bounded(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value().encode()) > MAX_ITEM_BYTES:
            raise ValueError(f"a local-storage value is at most {MAX_ITEM_BYTES} bytes")
        return value


class StorageOrigin(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    origin: str
    localStorage: tuple[StorageItem, ...] = Field(default=(), max_length=MAX_ITEMS_PER_ORIGIN)

    @field_validator("origin")
    @classmethod
    def _origin(cls, value: str) -> str:
        try:
            return normalize_origin(value)
        except OriginError as exc:
            raise ValueError(str(exc)) from exc


class StorageState(BaseModel):
    """Cookies and local storage for a task's browser, in Playwright's shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cookies: tuple[StorageCookie, ...] = Field(default=(), max_length=MAX_COOKIES)
    origins: tuple[StorageOrigin, ...] = Field(default=(), max_length=MAX_ORIGINS)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict):
            try:
                size = len(json.dumps(data, separators=(",", ":")).encode())
            except (TypeError, ValueError):
                return data  # not JSON-shaped: the fields' own checks say where
            if size > MAX_STATE_BYTES:
                raise ValueError(f"a storage state is at most {MAX_STATE_BYTES} bytes of JSON")
        return data

    def outside(self, origins: frozenset[str]) -> list[str]:
        """What of the state names a host or origin that is not one of `origins`."""
        hosts = {_host(o) for o in origins if o}
        wrong: list[str] = []
        for i, cookie in enumerate(self.cookies):
            if cookie.domain.lower() not in hosts:
                wrong.append(
                    f"cookies.{i}.domain {cookie.domain!r} is not the host of one of the task's"
                    " origins (a parent domain or a leading '.' is refused: it covers other hosts)"
                )
            elif cookie.secure and not any(
                o.startswith("https://") and _host(o) == cookie.domain.lower() for o in origins
            ):
                wrong.append(f"cookies.{i} is secure, but no https origin of the task has its host")
        for i, entry in enumerate(self.origins):
            if entry.origin not in origins:
                wrong.append(
                    f"origins.{i}.origin {entry.origin!r} is not one of the task's origins"
                )
        return wrong

    def secrets(self) -> frozenset[str]:
        """The values to keep out of everything the task shows or keeps."""
        values = {c.value.get_secret_value() for c in self.cookies}
        values |= {i.value.get_secret_value() for o in self.origins for i in o.localStorage}
        return frozenset(v for v in values if len(v) >= MIN_MASKED_CHARS)

    def for_playwright(self) -> dict[str, Any]:
        """The state as `BrowserContext`'s `storage_state` option takes it."""
        return {
            "cookies": [
                {
                    "name": c.name,
                    "value": c.value.get_secret_value(),
                    "domain": c.domain.lower(),
                    "path": c.path,
                    "expires": c.expires,
                    "httpOnly": c.httpOnly,
                    "secure": c.secure,
                    "sameSite": c.sameSite,
                }
                for c in self.cookies
            ],
            "origins": [
                {
                    "origin": o.origin,
                    "localStorage": [
                        {"name": i.name, "value": i.value.get_secret_value()}
                        for i in o.localStorage
                    ],
                }
                for o in self.origins
            ],
        }


def _host(origin: str) -> str:
    rest = origin.split("://", 1)[-1]
    if rest.startswith("["):
        return rest.split("]", 1)[0] + "]"
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


class StorageStates:
    """Each signed-in task's storage state, in this process's memory only."""

    def __init__(self) -> None:
        self._states: dict[str, StorageState] = {}

    def put(self, task_id: str, state: StorageState) -> None:
        self._states[task_id] = state

    def get(self, task_id: str) -> StorageState | None:
        return self._states.get(task_id)

    def holds(self, task_id: str) -> bool:
        return task_id in self._states

    async def drop(self, task_id: str, _reason: str = "") -> None:
        """The task ended or expired: its state is gone with it."""
        self._states.pop(task_id, None)
