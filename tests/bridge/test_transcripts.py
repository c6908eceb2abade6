"""Transcripts: persisted for every call, and free of every planted secret.

The property test drives a real gateway over real HTTP (served from a background event
loop so hypothesis can run plain examples against it) and reads each transcript back
both through `GET /v1/artifacts/{id}` and from the bytes on disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.app import build_app
from gateway.core.redaction import Redactor
from gateway.runtime import Gateway
from gateway.serving import serving
from gateway.testing import test_settings
from tests.bridge.conftest import (
    ALLOWED,
    EXTENSIONS,
    SCOPES,
    BridgeSetup,
    HandlerRuns,
    add_probe_tools,
    fixture,
)
from tests.conftest import task_body

ENV_SECRETS = {
    "SANDBOX_DB_PASSWORD": "pw-6c1f0e9d2b7a",
    "PROVIDER_API_KEY": "sk-live-93ab71cc0d4e5f",
}


@dataclass
class Host:
    base_url: str
    gateway: Gateway
    task: dict[str, Any]
    data_dir: Path
    http: httpx.Client


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    data_dir = tmp_path_factory.mktemp("transcripts") / "data"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV_SECRETS.items():
            patch.setenv(name, value)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def run(coro: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)

        gw = Gateway(
            test_settings(
                data_dir,
            )
        )
        add_probe_tools(gw, HandlerRuns())
        server = serving(build_app(gateway=gw, extensions=EXTENSIONS))
        base_url = run(server.__aenter__())
        try:
            with httpx.Client(base_url=base_url) as http:
                response = http.post(
                    "/v1/tasks",
                    json=task_body(scopes=SCOPES, allowed_tools=ALLOWED),
                    headers={"authorization": f"Bearer {gw.settings.control_key}"},
                )
                assert response.status_code == 201
                yield Host(base_url, gw, response.json(), data_dir, http)
        finally:
            run(server.__aexit__(None, None, None))
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()


# -- what gets planted --------------------------------------------------------------------

word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
secretish = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    min_size=16,
    max_size=40,
)


@dataclass(frozen=True)
class Plant:
    text: str  # what is written into the input
    core: str  # what must not survive anywhere in the transcript
    # A path glued to a word (`x/home/u`) is a relative path, not a host path: paths are
    # planted where a path starts. Token values need no delimiter at all.
    delimited: bool = False


def plants(task_tokens: dict[str, str], data_dir: Path) -> st.SearchStrategy[Plant]:
    home = os.path.expanduser("~")
    return st.one_of(
        st.sampled_from(sorted(task_tokens.values())).map(lambda t: Plant(t, t)),
        secretish.map(lambda v: Plant(f"\nAuthorization: Bearer {v}", v)),
        secretish.map(lambda v: Plant(f" Bearer {v}", v)),
        secretish.map(lambda v: Plant(f"\nCookie: session={v}; theme=dark", v)),
        secretish.map(lambda v: Plant(f"\nSet-Cookie: sid={v}; HttpOnly", v)),
        word.map(lambda u: Plant(f"/home/{u}/.ssh/id_ed25519", f"/home/{u}/.ssh/id_ed25519", True)),
        word.map(lambda u: Plant(f"/Users/{u}/Library/keys", f"/Users/{u}/Library/keys", True)),
        word.map(lambda u: Plant(f"/root/{u}/.netrc", f"/root/{u}/.netrc", True)),
        word.map(lambda u: Plant(f"{home}/{u}", f"{home}/{u}", True)),
        st.just(Plant(f"{data_dir.resolve()}/gateway.db", str(data_dir.resolve()))),
        st.sampled_from(sorted(ENV_SECRETS.values())).map(lambda v: Plant(v, v)),
    )


# Where a secret appears: right after any text (values such as tokens need no delimiter),
# or after a space, a newline, a quote, a bracket, an `=` or `:`, or inside a file URL.
# Header-shaped secrets (Authorization, Cookie) start their own line or word.
lead = st.sampled_from(["", " ", "\n", "\t", '"', "'", "(", "[", "=", ":", "x: ", "file://"])
filler = st.text(alphabet=st.characters(codec="utf-8", max_codepoint=0x7FF), max_size=24)


@st.composite
def planted_input(
    draw: st.DrawFn, strategy: st.SearchStrategy[Plant]
) -> tuple[dict[str, Any], list[str]]:
    secrets = draw(st.lists(strategy, min_size=1, max_size=4))
    texts = []
    for plant in secrets:
        before, after = draw(filler), draw(filler)
        # Filler that happens to spell a secret is not a leak of a planted one.
        assume(not any(p.core in before + after for p in secrets))
        texts.append(
            before
            + (draw(lead) or (" " if plant.delimited else ""))
            + plant.text
            + draw(st.sampled_from(["", " ", "\n", "'"]))
            + after
        )
    shape = draw(st.sampled_from(["text", "key", "nested", "list", "metadata"]))
    tool_input: dict[str, Any] = {"text": "plain"}
    if shape == "text":
        tool_input["text"] = " ".join(texts)
    elif shape == "key":
        tool_input.update(dict.fromkeys(texts, "v"))
    elif shape == "nested":
        tool_input["nested"] = {"deeper": {"value": texts}}
    elif shape == "list":
        tool_input["items"] = [{"note": t} for t in texts]
    else:
        tool_input["text"] = texts[0]
        tool_input["headers"] = {"x-note": " ".join(texts)}
    return tool_input, [s.core for s in secrets]


def _transcript_bytes(host: Host, answer: dict[str, Any]) -> list[bytes]:
    [ref] = answer["artifacts"]["transcripts"]
    agent = {"authorization": f"Bearer {host.task['tokens']['agent']}"}
    served = host.http.get(f"/v1/artifacts/{ref['artifact_id']}", headers=agent)
    assert served.status_code == 200
    on_disk = list(host.data_dir.glob(f"artifacts/*/*/{ref['artifact_id']}"))
    assert len(on_disk) == 1
    return [served.content, on_disk[0].read_bytes()]


def test_a_transcript_holds_the_request_and_the_result(host: Host) -> None:
    body = fixture("request_succeeded.json")
    body["request_id"] = "ptr_whole"
    answer = host.http.post(
        "/v1/parent-tools",
        json=body,
        headers={"authorization": f"Bearer {host.task['tokens']['bridge']}"},
    ).json()
    document = json.loads(_transcript_bytes(host, answer)[0])
    assert document["request"]["request_id"] == "ptr_whole"
    assert document["request"]["input"] == {"text": "hello"}
    assert document["result"]["status"] == "succeeded"
    assert document["result"]["output"] == {"echo": {"text": "hello"}}
    assert document["task_id"] == host.task["task_id"]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_planted_secret_survives_in_a_persisted_transcript(
    host: Host, data: st.DataObject
) -> None:
    tool_input, cores = data.draw(planted_input(plants(host.task["tokens"], host.data_dir)))
    raw_text = json.dumps(tool_input)
    body = fixture("request_succeeded.json")
    body["input"] = tool_input
    body["request_id"] = f"ptr_{data.draw(st.integers(0, 10**12))}"
    body["metadata"] = {"note": raw_text[:2000]}
    response = host.http.post(
        "/v1/parent-tools",
        json=body,
        headers={"authorization": f"Bearer {host.task['tokens']['bridge']}"},
    )
    answer = response.json()
    assume(answer.get("status") == "succeeded")  # e.g. a key the tool schema refuses
    for blob in _transcript_bytes(host, answer):
        text = blob.decode()
        for core in cores:
            assert core not in text, (core, text[:400])
            assert json.dumps(core)[1:-1] not in text


def test_secrets_in_tight_spots_are_redacted() -> None:
    """Regression: a host path right after `:` or inside `file:///`, and a token glued to a
    non-ASCII character, used to pass through."""
    redactor = Redactor([], include_env=False)
    assert "/home/bob" not in redactor.text("config at:/home/bob/.config/app.toml")
    assert "/home/bob" not in redactor.text("open file:///home/bob/report.pdf")
    assert "/Users/me" not in redactor.text("C:/Users/me/secrets.txt")
    # A signed token glued to a non-ASCII letter or digit has no word boundary either.
    token = "eyJ0IjoidGFza18xIn0.aw0aYA.NmSMTZOOJW2g8RFKI-xE8DKb6r2-TpUN9Y"
    assert token not in redactor.text(f"¹{token}é")
    # A header block escaped into a JSON string: the line break is the text `\n`.
    assert "s3ss10n-value" not in redactor.text('"GET /\\nCookie: sid=s3ss10n-value"')
    assert "/home/bob" not in redactor.text('"trace:\\n/home/bob/app.py"')
    # What is not a host path keeps its shape.
    assert redactor.text("http://localhost:8000/tmp/x") == "http://localhost:8000/tmp/x"
    assert redactor.text("src/home/page.py") == "src/home/page.py"


async def test_the_bridge_token_never_appears_in_a_transcript_or_the_answer(
    bridge: BridgeSetup,
) -> None:
    token = bridge.task["tokens"]["bridge"]
    body = fixture("request_succeeded.json")
    body["input"] = {"text": f"my token is {token}", "token": token}
    response = await bridge.live.http.post(
        "/v1/parent-tools", json=body, headers=bridge.bridge_headers
    )
    answer = response.json()
    ref = answer["artifacts"]["transcripts"][0]
    ref_art = await bridge.gw.store.get_artifact(ref["artifact_id"])
    stored = await bridge.gw.store.read_artifact(ref_art)
    assert token not in stored.decode()
    assert ref_art.task_id == bridge.task["task_id"]


@pytest.mark.parametrize(
    "run", ["x" * 200_000, "token" * 40_000, ("a" * 20 + ".") * 10_000], ids=["x", "token", "dots"]
)
def test_a_long_hostile_run_is_still_redacted(run: str) -> None:
    """Regression: such runs made the token and key=value patterns backtrack for minutes,
    stalling the call that carried them (the suite's timeout is what would notice)."""
    redactor = Redactor([], include_env=False)
    out = redactor.text(f"{run} GITHUB_TOKEN=ghp_abcdef123456 {run}")
    assert "ghp_abcdef123456" not in out
    assert len(out) > 2 * len(run) - 10
