"""Redaction: what is persisted or returned as evidence never carries a secret.

Removed from every value, at any depth: values under secret-looking keys (token,
authorization, cookie, password, secret, api key...), the same keys' values in JSON text,
bearer credentials, signed gateway tokens, JWTs, cookie headers, AWS access key ids,
GitHub, Slack and Stripe tokens, PEM private keys, passwords in URLs, the values of the
gateway's own secrets and of secret-looking environment variables, and host-local absolute
paths (home directories, the data dir, /tmp, /root...), which are replaced by a placeholder.

A number under a `tokens` key (`max_tokens`, `estimated_tokens`) is a count of a language
model's tokens, not a credential, and is kept: a person approving a run reads its cost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[redacted]"
PATH_REDACTED = "[path]"

_SECRET_KEY = re.compile(
    r"(?i)(^|[_\-.])(token|secret|password|passwd|pwd|authorization|cookie|set-cookie|"
    r"api[_-]?key|apikey|credential|private[_-]?key|session[_-]?id|bearer)s?($|[_\-.])"
)
# The plural alone: `tokens: 5000` counts, `token: 5000` may be a numeric secret.
_COUNT_KEY = re.compile(r"(?i)(^|[_\-.])tokens($|[_\-.])")
_PATTERNS = [
    # Authorization-style credentials anywhere in text.
    re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    # Cookie / Set-Cookie header lines; no `\b`: in a JSON-escaped header block the
    # line break before `Cookie:` is the text `\n`, and `nCookie` has no word boundary.
    re.compile(r"(?i)(set-)?cookie\s*[:=]\s*[^\r\n]+"),
    # JSON web tokens. Token patterns start where a run of token characters starts: not at
    # `\b`, which a non-ASCII letter or digit next to the token hides, and not anywhere,
    # which would retry every position of a long run (quadratic on a 200 kB string).
    re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    # itsdangerous-signed gateway tokens: payload.timestamp.signature.
    re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{4,12}\.[A-Za-z0-9_-]{20,}"),
    # key=value pairs with secret-looking keys, in query strings and env dumps. Matched from
    # the secret word on (`GITHUB_TOKEN=x` keeps `GITHUB_`), with a bounded tail: an
    # unbounded `[..]*word[..]*` retries every split of a long word (minutes on 200 kB).
    re.compile(r"(?i)(?:token|secret|password|api_?key|auth)[A-Za-z0-9_]{0,64}\s*=\s*[^\s&;,\"']+"),
    # The same keys as JSON text inside a string (a response body, a log line), quotes
    # escaped or not: `"password": "x"`, `\"api_key\":\"x\"`.
    re.compile(
        r'(?i)(\\?"[A-Za-z0-9_-]{0,32}(?:password|passwd|secret|token|api_?key|private_?key)'
        r'[A-Za-z0-9_-]{0,32}\\?"\s*:\s*)\\?"(?:[^"\\]|\\[^"])*\\?"'
    ),
    # Vendor key formats: AWS access key ids, GitHub, Slack and Stripe tokens.
    re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    re.compile(r"(?<![A-Za-z0-9-])xox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"),
    # PEM private keys, whole (a cut one too: from its header to the end of the text).
    re.compile(
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?:.|\n)*?(?:-----END [A-Z0-9 ]{0,40}"
        r"PRIVATE KEY-----|\Z)"
    ),
    # Credentials in a URL's user info: `https://user:pw@host` keeps `https://` and `@host`.
    re.compile(r"(?<=://)[^\s/@:\"'<>]{1,256}:[^\s/@\"'<>]{1,256}(?=@)"),
]


def _json_value(match: re.Match[str]) -> str:
    # A JSON key keeps its name and its quoting (escaped inside a string, or not).
    quote = '\\"' if match.group(1).startswith("\\") else '"'
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


_REPLACEMENT: dict[re.Pattern[str], Any] = {_PATTERNS[5]: _json_value}

# Absolute host paths: a POSIX path under a host-local root (the root alone too), or a
# Windows drive path. Relative workspace paths (README.md, src/x.py) are kept, and so are
# URL paths that only start like a root (`/runs`, `/optional`, `/data-sets`): the root's
# name must end its segment. A path also starts after an escaped line break or tab
# (`\n/home/...` in JSON-escaped text).
_HOST_ROOTS = (
    "home", "root", "Users", "tmp", "var", "etc", "opt", "srv", "mnt", "usr", "private", "proc",
    "run", "work", "data",
)  # fmt: skip
_HOST_PATH = re.compile(
    rf"(?:(?<![\w.-])|(?<=\\[nrt]))(?:/(?:{'|'.join(_HOST_ROOTS)})"
    r"(?![\w-])(?:/[^\s\"'<>|:;,]*)?|[A-Za-z]:\\[^\s\"'<>|]*|~/[^\s\"'<>|]*)"
)
_SECRET_ENV = re.compile(r"(?i)(token|secret|password|passwd|key|cookie|credential|auth)")


# Whether any pattern applies, cheaply: most strings (ids, names, prose, page snapshots)
# hold no secret, and skipping the substitutions for them keeps redaction off the hot path
# of every call. A pattern is searched only when its text holds one of the words it cannot
# match without (tested on the folded, lowercased text: a superset of what the
# case-insensitive patterns match); substring tests run in C. On a 2 kB page snapshot this
# takes 0.17 ms (0.03 ms without its `/runs` link, which brings in the host-path search);
# one regex of all the patterns took 0.48 ms when nothing matched.
_CHECKS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (("bearer", "basic", "token"), _PATTERNS[0]),
    (("cookie",), _PATTERNS[1]),
    (("eyj",), _PATTERNS[2]),
    ((), _PATTERNS[3]),  # a signed token has no word of its own: always searched
    (("token", "secret", "password", "api_key", "apikey", "auth"), _PATTERNS[4]),
    (("password", "passwd", "secret", "token", "key"), _PATTERNS[5]),
    (("akia", "asia", "agpa", "aida", "aroa"), _PATTERNS[6]),
    (("gh", "github_pat_"), _PATTERNS[7]),
    (("xox",), _PATTERNS[8]),
    (("_live_", "_test_"), _PATTERNS[9]),
    (("private key",), _PATTERNS[10]),
    (("://",), _PATTERNS[11]),
    ((*(f"/{root.lower()}" for root in _HOST_ROOTS), ":\\", "~/"), _HOST_PATH),
)
# The letters a case-insensitive pattern matches that lower() does not turn into them
# (`re` matches `i` to İ and ı, and `s` to ſ): folded first, so no spelling slips past.
_FOLD = str.maketrans({"İ": "i", "ı": "i", "ſ": "s"})


def _may_hold_secret(value: str) -> bool:
    folded = value.translate(_FOLD).lower()
    return any(
        (not words or any(word in folded for word in words)) and pattern.search(value)
        for words, pattern in _CHECKS
    )


CLEAN_MAX_CHARS = 96
CLEAN_MAX_ENTRIES = 8192


def _is_count(key: str, item: Any) -> bool:
    return (
        isinstance(item, int | float)
        and not isinstance(item, bool)
        and _COUNT_KEY.search(key) is not None
    )


class Redactor:
    """Redacts known secret values and secret-shaped text; built once per gateway."""

    def __init__(self, secrets: Iterable[str] = (), *, include_env: bool = True) -> None:
        values = {s for s in secrets if s and len(s) >= 4}
        if include_env:
            values |= {
                v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 6
            }
        # Longest first so a secret containing another is removed whole.
        self._secrets = sorted(values, key=len, reverse=True)
        # Short strings found clean, remembered: a record's keys and most of its values
        # (ids, statuses, names) repeat from record to record. Nothing that held a secret is
        # kept here, and a new secret empties it.
        self._clean: set[str] = set()

    def add_secret(self, value: str) -> None:
        if value and len(value) >= 4 and value not in self._secrets:
            self._secrets.append(value)
            self._secrets.sort(key=len, reverse=True)
            self._clean.clear()

    def text(self, value: str) -> str:
        if len(value) > CLEAN_MAX_CHARS:
            return self._text(value)
        if value in self._clean:
            return value
        out = self._text(value)
        if out == value:
            if len(self._clean) >= CLEAN_MAX_ENTRIES:
                self._clean.clear()
            self._clean.add(value)
        return out

    def _text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        if not _may_hold_secret(value):
            return value
        for pattern in _PATTERNS:
            value = pattern.sub(_REPLACEMENT.get(pattern, REDACTED), value)
        return _HOST_PATH.sub(PATH_REDACTED, value)

    def value(self, value: Any, *, _depth: int = 0) -> Any:
        if _depth > 64:
            return REDACTED
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                skey = self.text(key if isinstance(key, str) else str(key))
                out[skey] = (
                    REDACTED
                    if _SECRET_KEY.search(str(key))
                    and item not in (None, "", [], {})
                    and not _is_count(str(key), item)
                    else self.value(item, _depth=_depth + 1)
                )
            return out
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(item, _depth=_depth + 1) for item in value]
        return value
