"""The views a host app lets the tab channel open, each with a schema for its params.

The host registers its views once, at install time:

    from gateway.tabs import Views
    views = gw.services.get(Views)
    views.register("agent_builder", AgentBuilderParams, "Agent builder")

`open_view {view, params}` is accepted only for a registered view, with params that validate
against its model. Every string inside params is a label, never free text: a URL with a
scheme, a pseudo-scheme such as `javascript:`, or markup is refused wherever it appears.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.core.nested import Where, rebuilt

VIEW_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")

# `scheme://` anywhere, a dangerous pseudo-scheme anywhere, a protocol-relative `//host`
# at the start, or the opening of a tag/comment/doctype. Written so that Python and
# JavaScript read each the same way (the shim's copy is generated from these).
CONTROL_CHARACTER = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
# What a browser skips inside a scheme, folded out before the checks below.
WHITESPACE = r"[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
URL_SCHEME = r"[a-z][a-z0-9+.\-]*://"
PSEUDO_SCHEME = r"(javascript|vbscript|data|file|blob|filesystem):"
TAG_OPENING = r"<[a-z!/?]"
# A protocol-relative `//host`, or its `\\host` spelling, at the start of the folded value.
RELATIVE_URL = r"^(//|\\\\)"
_CONTROL = re.compile(CONTROL_CHARACTER)
_WHITESPACE = re.compile(WHITESPACE)
_URL = re.compile(URL_SCHEME)
_PSEUDO = re.compile(PSEUDO_SCHEME)
_TAG = re.compile(TAG_OPENING)
_RELATIVE = re.compile(RELATIVE_URL)
MAX_PARAMS_DEPTH = 8
# Why a label is refused, and why params are: the shim gives the same words (its copy is
# generated from these).
CONTROL_REFUSED = "control characters are not allowed"
URL_REFUSED = "a URL is not allowed here"
PSEUDO_REFUSED = "a script or data URL is not allowed here"
TAG_REFUSED = "markup is not allowed here"
TOO_DEEP = "is nested too deeply"


def unsafe_reason(value: str) -> str | None:
    """Why a label-like string may not travel in a UI action, or None when it may.

    Browsers ignore tabs, newlines and other control characters inside schemes
    (`java\\tscript:` works), so they are removed before the checks; case is folded too.
    """
    if _CONTROL.search(value):
        return CONTROL_REFUSED
    folded = _WHITESPACE.sub("", value).lower()
    if _URL.search(folded) or _RELATIVE.search(folded):
        return URL_REFUSED
    if _PSEUDO.search(folded):
        return PSEUDO_REFUSED
    if _TAG.search(value.lower()):
        return TAG_REFUSED
    return None


def check_labels(value: Any, *, where: str = "params") -> None:
    """Refuse unsafe strings anywhere in a JSON value (keys included)."""

    def place(at: Where) -> str:
        return where + "".join(f".{step}" if isinstance(step, str) else f"[{step}]" for step in at)

    def label(text: str, at: Where) -> str:
        reason = unsafe_reason(text)
        if reason is not None:
            raise ValueError(f"{place(at)}: {reason}")
        return text

    def too_deep(deep: Any, at: Where) -> Any:
        raise ValueError(f"{place(at)} {TOO_DEEP}")

    rebuilt(value, label, max_depth=MAX_PARAMS_DEPTH, beyond=too_deep, keys=True)


@dataclass(frozen=True)
class View:
    name: str
    params_model: type[BaseModel]
    title: str

    def describe(self) -> dict[str, Any]:
        """The view as the `welcome` frame lists it."""
        return {
            "name": self.name,
            "title": self.title,
            "params_schema": self.params_model.model_json_schema(),
        }


class Views:
    """The registered views of the host app (a service: `gw.services.get(Views)`)."""

    def __init__(self) -> None:
        self._views: dict[str, View] = {}

    def register(self, name: str, params_model: type[BaseModel], title: str) -> View:
        if not VIEW_NAME.match(name):
            raise ValueError(f"view name {name!r} must be 1 to 128 of [A-Za-z0-9_.:@-]")
        if name in self._views:
            raise ValueError(f"view {name!r} is already registered")
        reason = unsafe_reason(title)
        if reason is not None or not title:
            raise ValueError(f"view title {title!r}: {reason or 'must not be empty'}")
        view = View(name, params_model, title)
        self._views[name] = view
        return view

    def get(self, name: str) -> View | None:
        return self._views.get(name)

    def __iter__(self) -> Iterator[View]:
        return iter(self._views.values())

    def __len__(self) -> int:
        return len(self._views)

    def describe(self) -> list[dict[str, Any]]:
        return [view.describe() for view in sorted(self, key=lambda v: v.name)]

    def validate(self, name: str, params: Any) -> dict[str, Any]:
        """Params for `open_view` of this view, validated; raises ValueError otherwise."""
        view = self._views.get(name)
        if view is None:
            raise ValueError(f"no view named {name!r} is registered")
        check_labels(params)
        try:
            model = view.params_model.model_validate(params)
        except ValidationError as exc:
            raise ValueError(
                f"params do not match view {name!r}: {exc.error_count()} errors"
            ) from None
        dumped = model.model_dump(mode="json", exclude_none=True)
        # A model may add defaults or coerce values; the result must be as safe as the input.
        check_labels(dumped)
        return dumped
