"""Redaction never lets a planted secret through, whatever surrounds it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.core.redaction import _CHECKS, _FOLD, Redactor
from gateway.core.tokens import Purpose, TokenService

KNOWN_SECRET = "s3cr3t-value-9f8e7d6c5b4a"
redactor = Redactor([KNOWN_SECRET], include_env=False)
tokens = TokenService(["redaction-test-key-0123456789"])

filler = st.text(alphabet=st.characters(codec="utf-8", max_codepoint=0x2FFF), max_size=40)
token_value = st.sampled_from(list(Purpose)).flatmap(
    lambda p: st.text(alphabet="abcdef0123456789", min_size=4, max_size=12).map(
        lambda task: tokens.mint(f"task_{task}", p, 600)[0]
    )
)
planted = st.one_of(
    token_value,
    st.just(KNOWN_SECRET),
    st.text(alphabet="abcdefABCDEF0123456789-_", min_size=12, max_size=40).map(
        lambda v: f"Bearer {v}"
    ),
    st.text(alphabet="abcdef0123456789", min_size=8, max_size=30).map(
        lambda v: f"Cookie: session={v}"
    ),
    st.text(alphabet="abcdefghij", min_size=1, max_size=12).map(lambda u: f"/home/{u}/notes.txt"),
    st.text(alphabet="abcdefghij", min_size=1, max_size=12).map(lambda u: f"/root/{u}"),
)


def secret_core(value: str) -> str:
    """The part of a planted value that must not survive."""
    if value.startswith("Bearer "):
        return value.removeprefix("Bearer ")
    if value.startswith("Cookie: "):
        return value.split("=", 1)[1]
    return value


@settings(max_examples=300, deadline=None)
@given(before=filler, secret=planted, after=filler)
def test_a_planted_secret_never_survives_in_text(before: str, secret: str, after: str) -> None:
    assume(secret_core(secret) not in f"{before} {after}")
    out = redactor.text(f"{before} {secret} {after}")
    assert secret_core(secret) not in out


@settings(max_examples=200, deadline=None)
@given(
    secret=planted,
    shape=st.sampled_from(["value", "list", "nested", "key"]),
    key=st.sampled_from(["note", "data", "token", "authorization", "x"]),
)
def test_a_planted_secret_never_survives_in_structures(secret: str, shape: str, key: str) -> None:
    value: Any
    if shape == "value":
        value = {key: secret}
    elif shape == "list":
        value = {"items": ["a", secret, 3]}
    elif shape == "nested":
        value = {"a": {"b": [{"c": f"x {secret} y"}]}}
    else:
        value = {secret: "v"}
    out = json.dumps(redactor.value(value))
    assert secret_core(secret) not in out


def test_secret_keys_are_blanked_whatever_their_value() -> None:
    out = redactor.value({"api_key": "short", "password": "pw12", "headers": {"Cookie": "a=b"}})
    assert out == {
        "api_key": "[redacted]",
        "password": "[redacted]",
        "headers": {"Cookie": "[redacted]"},
    }


def test_a_count_of_model_tokens_is_kept_and_a_token_string_is_not() -> None:
    counts = {"estimated_tokens": 5000, "max_tokens": 1.5, "tokens": 12}
    assert redactor.value(counts) == counts
    out = redactor.value(
        {"tokens": "abc123xyz", "token": 123456, "password": 4321, "access_tokens": True}
    )
    assert out == {
        "tokens": "[redacted]",
        "token": "[redacted]",
        "password": "[redacted]",
        "access_tokens": "[redacted]",
    }


def test_relative_workspace_paths_and_plain_text_survive() -> None:
    text = "edit src/app.py and README.md; the run took 12 s"
    assert redactor.text(text) == text


@pytest.mark.parametrize(
    "text",
    ["/url: /runs", "open /runs/12", "/optional", "/etcetera/x", "/data-sets", "/users/12"],
)
def test_url_paths_that_start_like_a_host_root_survive(text: str) -> None:
    # A snapshot of a page linking to /runs is evidence an operator reads: it stays whole.
    assert redactor.text(text) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("see /tmp.", "see [path]."),
        ("(/home)", "([path])"),
        ("/run/user/0/bus", "[path]"),
        ("cd /data/x; ls", "cd [path]; ls"),
    ],
)
def test_a_host_root_alone_or_with_a_path_is_redacted(text: str, redacted: str) -> None:
    assert redactor.text(text) == redacted


def test_env_secrets_are_known(monkeypatch: Any) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "env-secret-xyz-123456")
    assert "env-secret-xyz-123456" not in Redactor().text("value env-secret-xyz-123456 here")


@pytest.mark.parametrize(
    "text",
    [
        "Bearer abcdefgh12345678",
        "basİc QWxhZGRpbjpvcGVu",  # re matches `i` to İ under IGNORECASE
        "ſecret=value-123",  # and `s` to ſ
        "password = hunter22",
        "tokenısh = x",
        "Set-Cookie: sid=1",
        "see C:\\Users\\ada\\key.pem",
        "~/notes.txt",
        "at /home/ada/x",
    ],
)
def test_text_a_pattern_applies_to_is_never_skipped(text: str) -> None:
    assert redactor.text(text) != text


def test_the_quick_check_folds_every_letter_a_pattern_would_match() -> None:
    # Any character `re` matches to a letter of a pattern word without IGNORECASE's help
    # from lower() must be folded by the quick check, or text with it would skip redaction.
    letters = {c for words, _ in _CHECKS for word in words for c in word if c.isalpha()}
    for code in range(0x10000):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF or char.isascii():
            continue
        for letter in letters:
            if re.fullmatch(letter, char, re.IGNORECASE):
                assert letter in char.translate(_FOLD).lower(), (hex(code), letter)


VENDOR_SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAY34FZKBOKMUTVV7A",
    "ghp_" + "a1B2c3D4e5" * 4,
    "gho_" + "Z9y8X7w6V5" * 4,
    "github_pat_11ABCDEFG0" + "x1_y2Z3w4" * 5,
    "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "xoxp-2222222222-3333333333-abcdefabcdef",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "rk_test_51HabcdEFghIJklMNopQRst",
]


@pytest.mark.parametrize("secret", VENDOR_SECRETS)
@pytest.mark.parametrize(
    "template", ["{}", "key={} end", "export X='{}'", '{{"v": "{}"}}', "log line: {}\n"]
)
def test_vendor_key_formats_are_removed(secret: str, template: str) -> None:
    assert secret not in redactor.text(template.format(secret))


def test_pem_private_keys_are_removed_whole_even_when_cut() -> None:
    body = "MIIEowIBAAKCAQEA7bq1" + "abcDEF123+/" * 20
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    text = redactor.text(f"config:\n{pem}\nnext line")
    assert body[:40] not in text and "next line" in text
    cut = redactor.text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body[:200]}")
    assert body[:40] not in cut


def test_url_userinfo_keeps_the_url_but_not_the_password() -> None:
    text = redactor.text("clone https://deploy:pa55w0rd-xyz@git.example.com/repo.git now")
    assert "pa55w0rd-xyz" not in text and "deploy" not in text
    assert "@git.example.com/repo.git now" in text
    # An @ in a path is not user info.
    assert redactor.text("see https://example.com/people/@ada") == (
        "see https://example.com/people/@ada"
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"password": "hunter2-xyz", "user": "ada"}',
        '{"db_password":"hunter2-xyz"}',
        '{\\"api_key\\": \\"hunter2-xyz\\"}',
        '{"client_secret" : "hunter2-xyz"}',
    ],
)
def test_secret_keys_in_json_text_lose_their_values(text: str) -> None:
    out = redactor.text(text)
    assert "hunter2-xyz" not in out
    assert "[redacted]" in out


def test_json_text_keeps_its_shape_when_a_value_is_removed() -> None:
    out = redactor.text('{"password": "hunter2-xyz", "user": "ada"}')
    assert json.loads(out) == {"password": "[redacted]", "user": "ada"}


def test_a_string_remembered_clean_is_redacted_once_it_becomes_a_secret() -> None:
    redactor = Redactor([], include_env=False)
    assert redactor.text("hunter2-value") == "hunter2-value"  # clean, remembered
    redactor.add_secret("hunter2-value")
    assert "hunter2-value" not in redactor.text("hunter2-value")


def test_a_short_secret_shaped_string_is_never_remembered_as_clean() -> None:
    redactor = Redactor([], include_env=False)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    for _ in range(3):
        assert token not in redactor.text(token)
    assert token not in redactor._clean
