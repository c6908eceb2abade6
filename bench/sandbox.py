"""A task's sandbox against the same app started directly.

- direct start (the baseline): the example app (`python -m examples.synthetic_app.sandboxed`)
  started from a checkout that is already there, on a listening unix socket, until its
  health path answers 2xx: what running the app costs without any sandbox;
- provision: what the local provider does for a task: write the commit out (checkout), start
  the app in its bubblewrap jail with its limits, and wait for the same health answer;
- provision on Incus: what the incus provider does: the checkout, a container of its own
  created and started, the app started in it, the same health answer;
- memory: PSS of a live sandbox (every process in it: bwrap's init and the app; on Incus,
  the container's init, the app and the proxy that carries its socket) against the
  directly started app, with several sandboxes live at once.

The app is this working tree's files committed into a throwaway repository, so the figures
are of the app as it is here. Run: `python -m bench.sandbox [--rounds N]`. Needs root and
bubblewrap (make setup); the Incus rows need Incus (scripts/ensure-incus; its daemon is
started for the run when none answers) and are left out where it is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.report import summary, write
from examples.synthetic_app.serve import SOURCE, example_repository
from gateway.browser.memory import process_tree, pss_kib
from gateway.core.sandbox_spec import IncusBackend, Provision
from gateway.parts import IncusConfig, LocalConfig, SandboxesConfig
from gateway.sandbox.checkout import extract
from gateway.sandbox.incus import IncusProvider
from gateway.sandbox.incus_sandbox import IncusSandbox
from gateway.sandbox.local import LocalProvider, LocalSandbox, host_unready, sandbox_processes
from gateway.sandbox.provider import Binding, SandboxHandle, SandboxProvider
from tests.servers.incus import IncusUnavailable, incus_daemon, incus_installed

MS = 1e3
LIVE_AT_ONCE = 4
GOAL = 2.0  # provision (checkout + jail + healthy) within 2x a direct start, p50
INCUS_GOAL = 1.5  # the same on Incus (checkout + container + healthy)
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return out.stdout.decode().strip()


def snapshot(into: Path) -> str:
    """This working tree's files as one commit of a repository at `into`."""
    listed = _git(SOURCE, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = SOURCE / name
        if source.is_file() and not source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    _git(into, "init", "-q", "-b", "main")
    _git(into, "add", "-A")
    _git(into, "commit", "-q", "-m", "bench")
    return _git(into, "rev-parse", "HEAD")


async def _healthy(path: Path, deadline_s: float = 60.0) -> None:
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 2)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 2)
            writer.close()
            if line.split()[1:2] == [b"200"]:
                return
        except (OSError, TimeoutError, IndexError):
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("the directly started app never became healthy")


async def direct_start(checkout: Path, work: Path) -> tuple[float, int, asyncio.subprocess.Process]:
    """Start the app from `checkout` without a sandbox; seconds to healthy, its PSS."""
    data = work / "data"
    data.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(work / "app.sock"))
    listener.listen(128)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "examples.synthetic_app.sandboxed",
        cwd=checkout,
        stdin=listener.fileno(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "SANDBOX_LISTEN_FD": "0", "SANDBOX_DATA": str(data)},
    )
    listener.close()
    await _healthy(work / "app.sock")
    elapsed = time.perf_counter() - started
    return elapsed, pss_kib(process_tree(process.pid)), process


def container_processes(handle: IncusSandbox) -> list[int]:
    """The container's processes (its cgroup's, cgroup v1 or v2), and the host's proxy
    process that serves its socket."""
    pids: list[int] = []
    for procs in (
        CGROUP_MEMORY / f"lxc.payload.{handle.name}" / "cgroup.procs",
        Path("/sys/fs/cgroup") / f"lxc.payload.{handle.name}" / "cgroup.procs",
    ):
        if procs.exists():
            pids += [int(line) for line in procs.read_text().split()]
            break
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"forkproxy" in command and str(handle.socket_path).encode() in command:
                pids.append(int(entry.name))
    return pids


def processes_of(handle: SandboxHandle) -> list[int]:
    if isinstance(handle, LocalSandbox):
        return sandbox_processes(handle.uid, handle.pid_namespace)
    assert isinstance(handle, IncusSandbox)
    return container_processes(handle)


async def measure(
    provider: SandboxProvider, spec: Provision, binding: Binding, rounds: int
) -> tuple[list[float], list[int], list[int], int]:
    """Provision times, and PSS and process counts of `LIVE_AT_ONCE` live sandboxes; the
    processes left after their teardown."""
    times: list[float] = []
    for i in range(rounds + 1):  # one warm-up round
        t0 = time.perf_counter()
        handle = await provider.provision(spec, binding)
        total = time.perf_counter() - t0
        await provider.teardown(handle, keep_data=False)
        if i:
            times.append(total)
    live = [await provider.provision(spec, binding) for _ in range(LIVE_AT_ONCE)]
    await asyncio.sleep(1.0)
    per_sandbox = [pss_kib(processes_of(h)) for h in live]
    counts = [len(processes_of(h)) for h in live]
    for handle in live:
        await provider.teardown(handle, keep_data=False)
    left = sum(len(processes_of(h)) for h in live)
    return times, per_sandbox, counts, left


async def run(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        commit = snapshot(repo)
        checkout = root / "checkout"
        checkout.mkdir()
        extract(repo, commit, checkout)
        repositories = {"synthetic-app": example_repository(repo)}
        binding = Binding(
            "task_bench", "org_bench", "bench", datetime.now(UTC) + timedelta(hours=1)
        )
        direct: list[float] = []
        checkouts: list[float] = []
        direct_pss: list[int] = []
        for i in range(rounds + 1):
            work = root / f"direct-{i}"
            work.mkdir()
            seconds, pss, process = await direct_start(checkout, work)
            process.kill()
            await process.wait()
            # The checkout alone, timed apart: into an empty folder, as the provider's.
            alone = root / f"checkout-{i}"
            alone.mkdir()
            c0 = time.perf_counter()
            extract(repo, commit, alone)
            if i:
                direct.append(seconds)
                checkouts.append(time.perf_counter() - c0)
                direct_pss.append(pss)
        sandboxes = SandboxesConfig(
            root=root / "sandboxes", repositories=repositories, max_live=LIVE_AT_ONCE + 1
        )
        local = LocalProvider(LocalConfig(sandboxes, uid_base=1_950_000_000))
        await local.start()
        measured = {
            "local": await measure(
                local, Provision(repository="synthetic-app", commit=commit), binding, rounds
            )
        }
        await local.close()
        if incus_installed():
            try:
                with incus_daemon() as socket_path:
                    backend = IncusBackend(socket=socket_path, deployment="bench")
                    incus = IncusProvider(IncusConfig(sandboxes, backend))
                    await incus.start()
                    spec = Provision(provider="incus", repository="synthetic-app", commit=commit)
                    measured["incus"] = await measure(incus, spec, binding, rounds)
                    await incus.close()
            except IncusUnavailable as exc:
                print(f"bench.sandbox: no Incus rows: {exc}", file=sys.stderr)
    d, c = summary(direct), summary(checkouts)
    direct_mib = sum(direct_pss) / len(direct_pss) / 1024
    rows: list[dict[str, Any]] = [
        {
            "measure": "direct start to healthy (baseline)",
            "p50 ms": d["p50"] * MS,
            "p99 ms": d["p99"] * MS,
            "ratio": 1.0,
        },
        {
            "measure": "  the checkout alone (git, files, digest)",
            "p50 ms": c["p50"] * MS,
            "p99 ms": c["p99"] * MS,
        },
        {"measure": "PSS, app started directly (MiB)", "p50 ms": direct_mib, "ratio": 1.0},
    ]
    what = {
        "local": "provision: checkout + jail + healthy",
        "incus": "provision on Incus: checkout + container + healthy",
    }
    goals = {"local": GOAL, "incus": INCUS_GOAL}
    met = True
    notes: dict[str, Any] = {"rounds": rounds, "note": "'p50 ms' holds MiB on the PSS rows"}
    for name, (times, per_sandbox, counts, left) in measured.items():
        p = summary(times)
        ratio = p["p50"] / d["p50"]
        mib = sum(per_sandbox) / len(per_sandbox) / 1024
        rows.append(
            {
                "measure": what[name],
                "p50 ms": p["p50"] * MS,
                "p99 ms": p["p99"] * MS,
                "ratio": ratio,
            }
        )
        rows.append(
            {
                "measure": f"PSS per live sandbox, {name}, {LIVE_AT_ONCE} live (MiB)",
                "p50 ms": mib,
                "ratio": mib / direct_mib,
            }
        )
        met = met and ratio <= goals[name]
        notes[name] = {
            "processes_per_sandbox": counts,
            "processes_left_after_teardown": left,
            "goal": {"provision_p50_over_direct_p50": goals[name]},
            "met": ratio <= goals[name],
        }
        print(f"{name}: provision p50 {ratio:.2f}x a direct start: goal {goals[name]}x", end=" ")
        print("met" if ratio <= goals[name] else "NOT met")
    notes["met"] = met
    write("sandbox", rows, notes)
    return notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    reason = host_unready()
    if reason is not None:
        print(f"bench.sandbox: {reason}", file=sys.stderr)
        return 2
    notes = asyncio.run(run(args.rounds))
    return 0 if notes["met"] else 2


if __name__ == "__main__":
    sys.exit(main())
