"""Ending a server process a test started: a signal, a bounded wait, then SIGKILL, and the
process always reaped (an unreaped child is a ResourceWarning, which the suites treat as
an error)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

Popen = subprocess.Popen[bytes]


def end(process: Popen, sig: signal.Signals, timeout_s: float) -> None:
    """Send `sig` and wait up to `timeout_s` for the process to exit; then kill it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def spawn(argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None) -> Popen:
    """Start a server with its output appended to `log_path` (a restarted one's log follows
    the one before it), in a session of its own: a Ctrl-C in the terminal reaches the
    harness, which stops the processes in order, not every process at once."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
