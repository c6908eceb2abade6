"""A real S3-compatible server on loopback: moto's server in a process of its own.

For the artifact tests, the cluster harness and `make cluster`. Nothing of the developer's
own AWS setup is used: the credentials are dummies (moto accepts any), and the config and
credentials files point at paths that do not exist.

    with moto_server(tmp_path / "moto.log") as endpoint:
        bucket = make_bucket(endpoint)
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from gateway.serving import free_port

HOST = "127.0.0.1"
REGION = "us-east-1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0

# moto accepts any credentials; these are what its clients here sign with.
DUMMY_KEY_ID = "testing"
DUMMY_SECRET = "testing"

# Variables through which boto3 would reach a real account, or another endpoint.
AWS_VARIABLES_TO_DROP = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)


def dummy_aws_env(home: Path) -> dict[str, str]:
    """The AWS variables of a process that talks to moto: dummy credentials, the region, and
    config files under `home` that do not exist (so no profile of the developer's is read)."""
    return {
        "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        # No instance metadata lookups either: there is no cloud here to ask.
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.contextmanager
def moto_server(log_path: Path, *, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """moto's S3 server for the block, on a free loopback port; yields its endpoint URL.

    `env` is the server's whole environment (None: this process's own)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process, endpoint = _start(log, log_path, env)
    try:
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _start(
    log: Any, log_path: Path, env: Mapping[str, str] | None
) -> tuple[subprocess.Popen[bytes], str]:
    # The port is free when asked and taken a moment later: another process may win it in
    # between, so a server that dies at once is started again on another.
    for _ in range(3):
        port = free_port(HOST)
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            # Its own session: a Ctrl-C in a terminal reaches the harness, which stops the
            # processes in order, rather than every process at once.
            start_new_session=True,
        )
        endpoint = f"http://{HOST}:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{endpoint}/moto-api/", timeout=1).status_code == 200:
                    return process, endpoint
            time.sleep(0.1)
        process.kill()
        process.wait()
    raise RuntimeError(f"moto's S3 server did not start (its log: {log_path})")


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for `endpoint` with the dummy credentials given outright, so none
    of this process's AWS variables or files decide where it goes or who it is."""
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=DUMMY_KEY_ID, aws_secret_access_key=DUMMY_SECRET, region_name=REGION
    )
    return session.client("s3", endpoint_url=endpoint)


def make_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh name unless given) on the server; its name."""
    name = name or f"artifacts-{secrets.token_hex(6)}"
    client = s3_client(endpoint)
    try:
        client.create_bucket(Bucket=name)
    finally:
        client.close()
    return name
