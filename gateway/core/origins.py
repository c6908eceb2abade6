"""Origins as exact, normalized strings: the unit every origin check compares.

An origin is `scheme://host[:port]` with a lowercase ASCII host and the scheme's default
port dropped. Anything that is not plainly an http(s) origin (user info, paths, odd IPv4
spellings, non-ASCII hosts that have not been IDNA-encoded by the caller) is refused, so a
look-alike can never normalize into an allowed value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class OriginError(ValueError):
    """The value is not a well-formed http(s) origin."""


def _check_host(host: str) -> str:
    if host.startswith("[") and host.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError as exc:
            raise OriginError(f"bad IPv6 host {host!r}") from exc
    if not host.isascii():
        raise OriginError(f"host {host!r} is not ASCII; give its IDNA (xn--) form")
    labels = host.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        # A host whose last label is numeric is an IPv4 address to a browser (WHATWG URL),
        # so only the canonical dotted quad is accepted: 2130706433, 0x7f.1 and 017.0.0.1
        # all spell 127.0.0.1 in a way a plain string comparison would miss.
        try:
            canonical = str(ipaddress.IPv4Address(host))
        except ValueError as exc:
            raise OriginError(f"host {host!r} is not a canonical IPv4 address") from exc
        if canonical != host:
            raise OriginError(f"host {host!r} is not a canonical IPv4 address")
        return canonical
    if any(not _HOST_LABEL.match(label) for label in labels):
        raise OriginError(f"host {host!r} is not a valid DNS name")
    return host


def _split(url: str) -> SplitResult:
    # urlsplit raises a bare ValueError for some hostile netlocs (an unclosed `[`, characters
    # that NFKC-normalize into `/?#@:`); callers expect only OriginError from this module.
    try:
        return urlsplit(url.strip())
    except ValueError as exc:
        raise OriginError(f"{url[:256]!r} is not a well-formed URL") from exc


def normalize_origin(value: str) -> str:
    """`HTTP://Example.COM:80/` -> `http://example.com`; raises OriginError otherwise."""
    parts = _split(value)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise OriginError(f"{value!r} is not an http or https origin")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise OriginError(f"{value!r} carries user info")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise OriginError(f"{value!r} is not a bare origin")
    return origin_of(value)


def origin_of(url: str) -> str:
    """The normalized origin of an absolute http(s) URL; raises OriginError otherwise."""
    parts = _split(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise OriginError(f"{url!r} is not an http or https URL")
    if parts.username is not None or parts.password is not None:
        raise OriginError(f"{url!r} carries user info")
    raw_host = parts.netloc.rsplit("@", 1)[-1]
    if raw_host.startswith("["):
        host_part, _, port_part = raw_host.partition("]")
        host = host_part + "]"
        port_text = port_part.removeprefix(":")
    else:
        host, _, port_text = raw_host.partition(":")
    if not host:
        raise OriginError(f"{url!r} has no host")
    host = _check_host(host.lower().rstrip("."))
    if port_text:
        # ASCII digits only: str.isdigit() also accepts `٨٠` and `²`, which int() reads
        # as 80 or refuses with a bare ValueError.
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            raise OriginError(f"{url!r} has a bad port")
        port = int(port_text)
    else:
        port = _DEFAULT_PORTS[scheme]
    suffix = "" if port == _DEFAULT_PORTS[scheme] else f":{port}"
    return f"{scheme}://{host}{suffix}"


def origin_allowed(header: str | None, allowed: Collection[str]) -> bool:
    """Whether an `Origin` header names one of `allowed` (normalized origins) exactly.

    A browser always sends an origin in its one serialized form, so nothing is normalized
    here: `HTTP://host`, a trailing `/` or `.`, or port `08765` are other strings, refused
    rather than taken for the configured origin (and never echoed back as it).
    """
    return header is not None and header in allowed


def is_allowed(url: str, allowed: frozenset[str]) -> bool:
    """True only when `url` is an http(s) URL whose exact origin is in `allowed`."""
    try:
        return origin_of(url) in allowed
    except OriginError:
        return False
